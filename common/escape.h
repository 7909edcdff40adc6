/* escape.h: text that came from events, made safe to print.
 *
 * Event data reaches findings' summaries and the CLI's output; a terminal
 * acts on the control characters in it (ESC sequences, an OSC 52 clipboard
 * write, the 8-bit CSI U+009B). These helpers write them as visible escapes
 * instead. */
#ifndef ST_ESCAPE_H
#define ST_ESCAPE_H

#include <stddef.h>

#include "buf.h"

/* Appends s[0..len) to out with every C0 control (U+0000-U+001F), DEL and C1
 * control (U+0080-U+009F) written as "\xNN" (C1 as "\u00NN"), and every byte
 * that is not part of valid UTF-8 as "\xNN". When json is set, s is JSON
 * text whose control characters can only be inside strings, and they are
 * written as "\u00NN" (valid JSON). Cannot fail. */
void st_escape_ctl(struct st_buf *out, const char *s, size_t len, int json);

/* Whether s[0..len) holds anything st_escape_ctl would escape. */
int st_escape_needed(const char *s, size_t len);

#endif
