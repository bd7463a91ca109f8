/*
 * base/json.h: the strict field check of a JSON object that every parser of
 * a signed or recorded document shares (the manifest's statement, the
 * environment record): no field it does not name, every field it names
 * present (unless optional) and of its kind.
 */
#ifndef APF_BASE_JSON_H
#define APF_BASE_JSON_H

#include <jansson.h>

enum apf_json_kind {
	APF_JSON_STRING, /* any string, "" included */
	APF_JSON_TEXT,	 /* a non-empty string */
	APF_JSON_COUNT,	 /* an integer >= 0 */
	APF_JSON_NUMBER, /* an integer or a real */
	APF_JSON_OBJECT,
	APF_JSON_ARRAY,
	APF_JSON_SHA256, /* a string of 64 lowercase hex digits */
	APF_JSON_ANY,	 /* present, of any kind */
};

/* Or'ed into a kind: the field may also be null, or be absent (a field
 * added to a record after records without it were signed). */
#define APF_JSON_OR_NULL 0x100u
#define APF_JSON_OPTIONAL 0x200u

struct apf_json_field {
	const char *name; /* NULL ends the list */
	unsigned kind;	  /* an apf_json_kind, with the flags above */
};

/* Checks o against fields: not an object, a field not in the list, or a
 * listed one missing or of the wrong kind is APF_EINPUT with
 * "<what>: <where>: not an object", "<what>: <where>: unexpected field
 * 'k'" or "<what>: <where>.<name>: missing or of the wrong type" (or "...
 * not a SHA-256 (64 lowercase hex digits)"). */
int apf_json_check_fields(const json_t *o, const char *what, const char *where,
			  const struct apf_json_field *fields);

#endif
