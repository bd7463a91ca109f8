/*
 * fuzz_search_space.c: libFuzzer target for tuning_search_space.ini
 * (apf_search_space_parse). A space that parses must give draws inside it:
 * each range value within [min, max] and each choice one of the feasible
 * points, for a few (seed, study, trial).
 */
#include "fuzzlib.h"

#include <math.h>

#include "tuning/tuning.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = fuzz_text(data, size);
	apf_search_space *s;
	apf_error_clear();
	int rc = apf_search_space_parse(&s, text, "fuzz_space.ini");
	fuzz_expect(rc, "apf_search_space_parse");
	free(text);
	if (rc)
		return 0;
	for (long trial = 0; trial < 3; trial++) {
		apf_hparams h;
		apf_error_clear();
		rc = apf_tuning_draw(&h, s, 7, trial % 2, trial, 3);
		fuzz_expect(rc, "apf_tuning_draw");
		if (rc)
			continue;
		if (h.n != s->ndims)
			abort();
		for (size_t i = 0; i < h.n; i++) {
			const struct apf_hp_dim *d = &s->dims[i];
			if (d->kind == APF_HP_RANGE) {
				double lo = fmin(d->min, d->max),
				       hi = fmax(d->min, d->max);
				if (h.words[i] || !(h.values[i] >= lo &&
						    h.values[i] <= hi)) {
					fprintf(stderr,
						"%s: %g outside [%g, %g]\n",
						d->name, h.values[i], lo, hi);
					abort();
				}
				continue;
			}
			size_t k = 0;
			for (; k < d->nchoices; k++)
				if (h.words[i] ? !strcmp(h.words[i], d->choices[k])
					       : h.values[i] == d->values[k])
					break;
			if (k == d->nchoices)
				abort();
		}
		json_t *j = apf_hparams_to_json(&h);
		apf_hparams back;
		if (!j || apf_hparams_from_json(&back, j) != 0 || back.n != h.n)
			abort();
		apf_hparams_free(&back);
		json_decref(j);
		apf_hparams_free(&h);
	}
	apf_search_space_free(s);
	return 0;
}
