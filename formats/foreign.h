/* formats/foreign.h: the recognisers of formats diskimg cannot read
 * (foreign.c), pure functions of an image's first BLK_PROBE_BYTES and its
 * name, exposed for the unit tests. */
#ifndef DISKIMG_FORMATS_FOREIGN_H
#define DISKIMG_FORMATS_FOREIGN_H

#include <stddef.h>
#include <stdint.h>

int foreign_probe_qcow(const uint8_t *buf, size_t len, const char *filename);
int foreign_probe_qed(const uint8_t *buf, size_t len, const char *filename);
int foreign_probe_parallels(const uint8_t *buf, size_t len, const char *filename);
int foreign_probe_bochs(const uint8_t *buf, size_t len, const char *filename);
int foreign_probe_cloop(const uint8_t *buf, size_t len, const char *filename);
int foreign_probe_dmg(const uint8_t *buf, size_t len, const char *filename);
int foreign_probe_luks(const uint8_t *buf, size_t len, const char *filename);

#endif
