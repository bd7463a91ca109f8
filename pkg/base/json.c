/*
 * json.c: the strict field check of a JSON object (base/json.h).
 */
#include "base/json.h"

#include <string.h>

#include "base/base.h"

static int kind_ok(const json_t *x, unsigned kind)
{
	if (!x)
		return (kind & APF_JSON_OPTIONAL) != 0;
	if (json_is_null(x) && (kind & APF_JSON_OR_NULL))
		return 1;
	switch ((enum apf_json_kind)(kind & 0xffu)) {
	case APF_JSON_STRING:
		return json_is_string(x);
	case APF_JSON_TEXT:
		return json_is_string(x) && json_string_length(x) > 0;
	case APF_JSON_COUNT:
		return json_is_integer(x) && json_integer_value(x) >= 0;
	case APF_JSON_NUMBER:
		return json_is_number(x);
	case APF_JSON_OBJECT:
		return json_is_object(x);
	case APF_JSON_ARRAY:
		return json_is_array(x);
	case APF_JSON_SHA256:
		return json_is_string(x) &&
		       apf_is_hex_digest(json_string_value(x));
	case APF_JSON_ANY:
		return 1;
	}
	return 0;
}

int apf_json_check_fields(const json_t *o, const char *what, const char *where,
			  const struct apf_json_field *fields)
{
	if (!json_is_object(o))
		return apf_error(APF_EINPUT, what, "%s: not an object", where);
	const char *key;
	json_t *v;
	json_object_foreach((json_t *)o, key, v)
	{
		const struct apf_json_field *f = fields;
		while (f->name && strcmp(f->name, key))
			f++;
		if (!f->name)
			return apf_error(APF_EINPUT, what,
					 "%s: unexpected field '%s'", where, key);
	}
	for (const struct apf_json_field *f = fields; f->name; f++)
		if (!kind_ok(json_object_get(o, f->name), f->kind))
			return apf_error(
				APF_EINPUT, what, "%s.%s: %s", where, f->name,
				(f->kind & 0xffu) == APF_JSON_SHA256
					? "missing or not a SHA-256 (64 "
					  "lowercase hex digits)"
					: "missing or of the wrong type");
	return 0;
}
