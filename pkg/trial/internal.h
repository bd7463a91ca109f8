/*
 * internal.h: what the trial package's files share and nothing else uses.
 */
#ifndef APF_TRIAL_INTERNAL_H
#define APF_TRIAL_INTERNAL_H

#include "trial/trial.h"

struct apf_submission {
	void *handle;
	int (*batch_size)(const char *);
	int (*init)(apf_ctx *, const apf_hparams *, apf_prng);
	int (*update)(apf_ctx *, const apf_hparams *, const apf_batch *,
		      const apf_eval_results *, int64_t, apf_prng,
		      const apf_train_state *);
	int (*prepare)(apf_ctx *, const apf_hparams *, int64_t, apf_prng);
	int (*select)(apf_ctx *, const apf_hparams *, int64_t, apf_prng,
		      const apf_batch **);
};

#endif
