/* common/json.h: a small streaming JSON writer for --output=json and stats.
 *
 * Output is indented with four spaces, like qemu-img's, so scripts that
 * parse qemu-img output parse ours.  Keys are given for members of objects
 * and NULL for elements of arrays. */
#ifndef DISKIMG_COMMON_JSON_H
#define DISKIMG_COMMON_JSON_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define JSON_MAX_DEPTH 16

struct json_writer {
    FILE *f;
    int depth;
    bool first[JSON_MAX_DEPTH]; /* no element written yet at this depth */
    bool compact;               /* one line, no indentation */
};

void json_init(struct json_writer *w, FILE *f, bool compact);
void json_begin_object(struct json_writer *w, const char *key);
void json_end_object(struct json_writer *w);
void json_begin_array(struct json_writer *w, const char *key);
void json_end_array(struct json_writer *w);
void json_str(struct json_writer *w, const char *key, const char *value);
void json_uint(struct json_writer *w, const char *key, uint64_t value);
void json_int(struct json_writer *w, const char *key, int64_t value);
void json_double(struct json_writer *w, const char *key, double value);
void json_bool(struct json_writer *w, const char *key, bool value);
/* Ends the document with a newline. */
void json_finish(struct json_writer *w);

#endif
