/*
 * refcurve: a workload's reference curves and the plausibility rule that
 * holds a unit's progress against them - the backstop that `apf verify` and
 * `apf score` share (issue 29). It does not depend on finding how a run
 * cheated: a unit that reaches its target in far fewer training examples
 * than any target-setting run ever needed is flagged, whatever the
 * mechanism, so that the next unknown cheat is at least visible (MLPerf's
 * reference-convergence idea).
 *
 * Progress is measured in training examples seen, global_step x the batch
 * size the log's clock_start records: not in seconds (which depend on the
 * hardware and the machine's load) nor in steps (which depend on the batch
 * size).
 *
 * The file. <workloads dir>/references/<workload dir>.json (a held-out
 * variant's workload directory is <workload>_<variant>), outside the
 * workload's own folder so that the workload's tree digest, which every
 * entry's manifest holds, does not change when a curve is recorded.
 * workloads/reference_curves.py writes it from apf run directories:
 *
 *   {"format": "apf-reference-curve-v1", "workload": "fmnist_mlp",
 *    "metric": "accuracy", "direction": "max",
 *    "runs": [{"label": "nadamw study_1/fmnist_mlp/trial_1 ...",
 *              "points": [[examples, validation value], ...], ...}, ...],
 *    "provenance": {...}}
 *
 * One run's points are its evals in order (examples never decreasing; the
 * script keeps those the rule can use);
 * other keys of a run (batch_size, source, ...) and the provenance are for
 * people and are not read. Anything else at the top level, a duplicate key,
 * a value of the wrong kind or a workload other than the one asked for is
 * refused, naming the file and the key.
 *
 * The rule. Evals come once an eval period, so a run's first eval at or
 * past a level m is only an upper bound on when it got there; what is known
 * for sure is that at its last eval below m (its best so far still short of
 * m) it had not. For each reference run that reached m, that eval's
 * examples bound its first reach from below; the reference bound B(m) is
 * the smallest over those runs (the fastest run's). A unit that first meets
 * m after E examples is implausible when
 *
 *     E < APF_REFCURVE_FACTOR x B(m),
 *
 * so a flag is never an artefact of either side's eval spacing: the unit
 * was truly more than 1 / APF_REFCURVE_FACTOR times faster than the fastest
 * reference. Where no reference run reached m, B(m) is the most examples
 * any of them saw without reaching it. B(m) = 0 (a run met m at its first
 * eval) flags nothing. The level checked is the unit's validation target,
 * at the first eval meeting it: the figure time-to-target is scored at.
 */
#ifndef APF_REFCURVE_H
#define APF_REFCURVE_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

#define APF_REFCURVE_FORMAT "apf-reference-curve-v1"
/* Under the workloads directory. */
#define APF_REFCURVE_DIR "references"
#define APF_MAX_REFCURVE_BYTES ((size_t)16 << 20)

/* f: a unit more than 1/f times faster, in examples to the target, than
 * the fastest tuned reference run is flagged. Published gains of new
 * training algorithms over well-tuned baselines are far below 4x: the
 * winner of AlgoPerf's first competition (Kasimbeg et al., 2025) trained
 * about 28% faster than the NAdamW baseline, the self-tuning winner about
 * 8%; Schmidt et al. (2021) and Dahl et al. (2023) find tuned optimizers
 * within a small factor of one another; and a larger batch does not cut
 * the examples needed below the small-batch figure (Shallue et al., 2019:
 * at best, perfect scaling keeps it constant). AlgoPerf's own scale stops
 * at 4: its performance profiles span ratios 1 to 4, and its held-out rule
 * gives nothing for a time over 4x the best. A unit 4x ahead of the
 * fastest target-setting run is therefore outside what honest training
 * has shown, and what a smuggled model or leaked labels look like. */
#define APF_REFCURVE_FACTOR 0.25
#define APF_REFCURVE_FACTOR_TEXT "1/4"

typedef struct apf_refcurve apf_refcurve;

/* Reads a reference file's text; name is what messages call it, workload
 * the workload directory it must be for. */
int apf_refcurve_parse(apf_refcurve **out, const char *text, size_t len,
		       const char *name, const char *workload);
/* <workloads_dir>/references/<workload>.json; 0 with *out NULL when there
 * is no such file (the caller says "no reference curve for <workload>"),
 * an error when there is one that cannot be read. */
int apf_refcurve_load(apf_refcurve **out, const char *workloads_dir,
		      const char *workload);
void apf_refcurve_free(apf_refcurve *c);
/* The file it was read from. */
const char *apf_refcurve_path(const apf_refcurve *c);
/* The metric (its validation/<metric> column) and direction (+1 max, -1
 * min) the curve is of. */
const char *apf_refcurve_metric(const apf_refcurve *c);
int apf_refcurve_direction(const apf_refcurve *c);
size_t apf_refcurve_runs(const apf_refcurve *c);

/* What the reference says of a level. */
struct apf_refcurve_bound {
	int reached;      /* some reference run reached the level */
	uint64_t below;   /* B(m): reached: the fewest examples at a run's last
			   * eval below the level (0: one met it at its first
			   * eval); else the most examples any run saw */
	uint64_t first;   /* reached: the fewest examples at a run's first
			   * eval meeting it */
	const char *run;  /* the label of the run that sets below */
};
void apf_refcurve_bound(struct apf_refcurve_bound *out, const apf_refcurve *c,
			double level);

/* Whether value meets level in direction (+1: >=, -1: <=); NaN never
 * does. */
int apf_refcurve_meets(double value, double level, int direction);

/* A unit held against a curve. */
struct apf_refcurve_verdict {
	int met;          /* one of its evals met the level */
	int implausible;  /* examples < APF_REFCURVE_FACTOR x ref.below */
	double level;
	double value;     /* at the first eval meeting it */
	uint64_t global_step, batch_size;
	uint64_t examples; /* global_step x batch_size (saturating) */
	struct apf_refcurve_bound ref;
	double ratio;     /* examples / ref.below; INFINITY when below is 0 */
};

/* Judges a unit at level (its validation target): its evals' global steps
 * and validation values in log order (n of them) and its batch size. A
 * batch size of 0 (unknown) never flags. */
void apf_refcurve_judge(struct apf_refcurve_verdict *out,
			const apf_refcurve *c, double level,
			uint64_t batch_size, const uint64_t *steps,
			const double *values, size_t n);

/* One line for a report, the same in verify and score: "<unit> reached
 * validation/<metric> <level> (its target) after E examples (step S x
 * batch B): <E/B(m)> of the <B(m)> examples by which no reference run had
 * reached it (the last eval below it: <run>; first reached at F;
 * <file>), under 1/4". */
int apf_refcurve_describe(apf_buf *out, const apf_refcurve *c,
			  const char *unit,
			  const struct apf_refcurve_verdict *v);

#endif
