/* nbd/names.h: wire values to their spec names, for every log line. */
#ifndef DISKIMG_NBD_NAMES_H
#define DISKIMG_NBD_NAMES_H

#include <stdint.h>

const char *nbd_cmd_name(uint16_t cmd);
const char *nbd_opt_name(uint32_t opt);
const char *nbd_rep_name(uint32_t rep);
const char *nbd_err_name(uint32_t err);
/* errno (positive) -> NBD_E* wire value, as the spec asks. */
uint32_t nbd_errno_to_wire(int err);

#endif
