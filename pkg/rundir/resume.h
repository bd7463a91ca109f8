/*
 * resume.h: what the log says about one unit, read the way a resumed run
 * reads it (docs/design.md section 2.7): the unit's records in order, a resume
 * from eval j discarding what came after eval j (work lost with a crashed
 * supervisor), a resume from eval 0 starting the unit over. The runner
 * resumes from it; the verifier's walk (verify/records.c) checks the same
 * story strictly, record by record, and keeps the same evals.
 */
#ifndef APF_RUNDIR_RESUME_H
#define APF_RUNDIR_RESUME_H

#include <jansson.h>
#include <stdint.h>

struct apf_rundir_unit {
	int started, ended, failed;
	int64_t last_eval;        /* index of the last kept eval, 0: none */
	int64_t global_step;
	uint64_t sub_ns, eval_ns, log_ns;
	int64_t preemptions;      /* resumes so far */
	char ckpt_sha256[65];     /* the last kept eval's checkpoint */
	json_t *rows;             /* the kept eval records (NULL: none) */
	int64_t time_to_target_ns; /* -1: not met */
	int64_t batch_size;       /* the largest clock_start's; 0: none */
	uint64_t budget_ns;       /* the last trial_start's; 0: none */
};

/* Whether a time-to-target counts for a score: met (>= 0) and under the
 * budget. A unit's last eval, at or past its budget, is logged but meets
 * no target (docs/design.md 3.5: AlgoPerf makes no eval there). */
static inline int apf_rundir_ttt_counts(int64_t ttt_ns, uint64_t budget_ns)
{
	return ttt_ns >= 0 && (uint64_t)ttt_ns < budget_ns;
}

void apf_rundir_unit_init(struct apf_rundir_unit *s);
/* Applies one of the unit's records (its event and its object). */
void apf_rundir_unit_apply(struct apf_rundir_unit *s, const char *event,
			   const json_t *rec);
void apf_rundir_unit_free(struct apf_rundir_unit *s);

#endif
