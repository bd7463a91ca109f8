"""End-to-end: apf pack compiles the submission before it signs anything.

A submitter must learn at pack time, not after the entry is sealed and a
run has been scheduled, that the code cannot run: pack builds it in the
runner's sandbox with the runner's flags and reads the shared object's
exports (without running any of it). Each refusal is exit 2 with the
reason, and leaves no entry behind. An entry packed with --no-build still
meets the same check in the runner's own build.
"""
import os

import apftest
from apftest import ApfCase, BLOBS
from test_run import sandbox_available

GOOD = r"""
#include <apf/submission.h>
const int apf_abi_version = APF_ABI_VERSION;
int get_batch_size(const char *w) { (void)w; return 64; }
int init_optimizer_state(apf_ctx *c, const apf_hparams *h, apf_prng r)
{ (void)c; (void)h; (void)r; return 0; }
int update_params(apf_ctx *c, const apf_hparams *h, const apf_batch *b,
		  const apf_eval_results *e, int64_t s, apf_prng r,
		  const apf_train_state *t)
{
	(void)h; (void)e; (void)r; (void)t; (void)s;
	double loss;
	if (apf_loss_grad(c, b, &loss))
		return -1;
	apf_axpy(c, apf_all_params(c), -0.05f, apf_all_grads(c));
	return 0;
}
"""


class PackBuild(ApfCase):
    def setUp(self):
        super().setUp()
        if not sandbox_available():
            self.skipTest("the kernel refuses user namespaces here")
        self.ok("keygen")

    def submission(self, name, code, files=None):
        self.write(f"{name}/submission.ini",
                   f"[submission]\nname = {name}\nauthors = tests\nruleset = self\n"
                   "[tuning]\nstudies = 1\n")
        if code is not None:
            self.write(f"{name}/submission.c", code)
        for rel, data in (files or {}).items():
            self.write(f"{name}/{rel}", data)
        return self.path(name)

    def refused(self, name, code, why, files=None):
        sub = self.submission(name, code, files)
        out = self.path(f"{name}.apf")
        r = self.fails(2, "pack", sub, "-w", BLOBS, "-o", out)
        self.assertEqual(r.err.splitlines()[-1], f"apf: {sub}: does not build: {why}", r)
        self.assertFalse(os.path.exists(out), f"{name}: an entry was written")
        self.assertEqual(os.listdir(self.scratch), [], "the build's directory was left behind")
        return sub

    def test_a_submission_that_builds_is_packed(self):
        sub = self.submission("good", GOOD)
        self.ok("pack", sub, "-w", BLOBS, "-o", self.path("good.apf"))
        self.assertEqual(os.listdir(self.scratch), [])

    def test_every_baseline_builds(self):
        base = os.path.join(apftest.ROOT, "submissions", "baselines")
        for name in sorted(os.listdir(base)):
            self.ok("pack", os.path.join(base, name), "-w", BLOBS, "-o",
                    self.path(f"{name}.apf"))

    def test_missing_required_functions(self):
        for fn in ("update_params", "init_optimizer_state", "get_batch_size"):
            self.refused(f"no_{fn}", GOOD.replace(f"int {fn}(", f"static int unused_{fn}(")
                         .replace("{ (void)c; (void)h; (void)r; return 0; }",
                                  "{ (void)c; (void)h; (void)r; return 0; }\n"
                                  f"int keep_{fn}(void) {{ return 0; }}"),
                         f"does not define {fn} (apf/submission.h lists what a "
                         "submission exports)")

    def test_no_abi_version_and_a_wrong_one(self):
        self.refused("noabi", GOOD.replace("const int apf_abi_version = APF_ABI_VERSION;", ""),
                     "does not define apf_abi_version (apf/submission.h lists what a "
                     "submission exports)")
        self.refused("abi7", GOOD.replace("= APF_ABI_VERSION", "= 7"),
                     "apf_abi_version is 7; this apf implements ABI 1 to 2")
        self.refused("abifn", GOOD.replace("const int apf_abi_version = APF_ABI_VERSION;",
                                           "int apf_abi_version(void) { return 1; }"),
                     "apf_abi_version is a function, not a variable")

    def test_an_abi_1_entry_still_packs(self):
        # ABI 2 only appended operations: an entry built for 1 never reaches
        # past them, so it must keep packing (and running) unchanged.
        sub = self.submission("abi1", GOOD.replace("= APF_ABI_VERSION", "= 1"))
        self.ok("pack", sub, "-w", BLOBS, "-o", self.path("abi1.apf"))

    def test_an_entry_point_that_is_not_a_function(self):
        # Without apf/submission.h nothing stops the compiler.
        self.refused("updvar", "const int apf_abi_version = 1;\n"
                     "int get_batch_size(const char *w) { (void)w; return 8; }\n"
                     "int init_optimizer_state(void) { return 0; }\n"
                     "int update_params = 3;\n",
                     "update_params is not a function")

    def test_a_compile_error_names_file_and_line(self):
        line = GOOD.count("\n") + 1
        self.refused("syntax", GOOD + "int broken = ;\n",
                     f"submission.c:{line}:14: error: expected expression before ';' token")
        line = GOOD[:GOOD.index("apf_axpy(")].count("\n") + 1
        sub = self.submission("implicit", GOOD.replace("apf_axpy(", "apf_nope("))
        r = self.fails(2, "pack", sub, "-w", BLOBS, "-o", self.path("implicit.apf"))
        self.assertIn(f"apf: {sub}: does not build: submission.c:{line}:9: error: implicit "
                      "declaration of function 'apf_nope'", r.err)

    def test_a_compile_error_is_shown_with_its_source_line(self):
        line = GOOD.count("\n") + 1
        sub = self.submission("shown", GOOD + "int broken = ;\n")
        r = self.fails(2, "pack", sub, "-w", BLOBS, "-o", self.path("shown.apf"))
        err = r.err.splitlines()
        self.assertEqual(err[0], f"apf: pack: {sub}: the compiler refuses it:")
        self.assertIn(f"    submission.c:{line}:14: error: expected expression before "
                      "';' token", err)
        # gcc's quote of the line, under it the caret at column 14.
        quoted = next(i for i, l in enumerate(err) if "int broken = ;" in l)
        self.assertEqual(err[quoted + 1].index("^"), err[quoted].index(";"), r.err)
        self.assertTrue(err[-1].startswith(f"apf: {sub}: does not build: "), r.err)

    def test_compiler_warnings_are_shown_when_packing(self):
        line = GOOD.count("\n") + 1
        sub = self.submission("warns", GOOD + "static int unused_fn(void) { return 0; }\n")
        r = self.ok("pack", sub, "-w", BLOBS, "-o", self.path("warns.apf"))
        err = r.err.splitlines()
        self.assertEqual(err[0], f"apf: pack: {sub}: the compiler warns (the runner's "
                         "build.log will say the same):")
        self.assertIn(f"    submission.c:{line}:12: warning: 'unused_fn' defined but not "
                      "used [-Wunused-function]", err)
        self.assertTrue(os.path.exists(self.path("warns.apf")))
        # A clean build says nothing of the compiler.
        sub = self.submission("clean", GOOD)
        self.assertNotIn("compiler", self.ok("pack", sub, "-w", BLOBS, "-o",
                                             self.path("clean.apf")).err)

    def test_hyperparameter_names_the_space_lacks_are_named_at_pack_time(self):
        code = GOOD.replace(
            "{ (void)c; (void)h; (void)r; return 0; }",
            "{\n\t(void)r;\n"
            "\t/* apf_hp(c, h, \"commented\", 1) */\n"
            "\tconst char *s = \"apf_hp(c, h, \\\"quoted\\\", 1)\";\n"
            "\tdouble a = apf_hp(c, h, \"learnig_rate\", 0.1);\n"
            "\tdouble b = apf_hp(c, h, \"learnig_rate\", 0.2);\n"
            "\tconst char *w = apf_hp_word(c, h,\n\t\t\"optimzer\", \"adam\");\n"
            "\tint k = apf_hp_has(c, h, s) + apf_hp_has(c, h, \"beta2\");\n"
            "\t(void)a; (void)b; (void)w; (void)k;\n\treturn 0;\n}")
        sub = self.submission("names", code, {
            "tuning_search_space.ini": "[learning_rate]\nmin = 1e-3\nmax = 1e-1\n"
                                       "scaling = log\n[optimizer]\n"
                                       "feasible_points = adam, sgd\n"})
        ini = os.path.join(sub, "submission.ini")
        with open(ini) as f:
            text = f.read()
        with open(ini, "w") as f:
            f.write(text.replace("ruleset = self", "ruleset = external"))
        r = self.ok("pack", sub, "-w", BLOBS, "-o", self.path("names.apf"))
        said = [l for l in r.err.splitlines() if l.startswith("apf: pack: warning:")]
        first = code[:code.index('"learnig_rate"')].count("\n") + 1
        word = code[:code.index('"optimzer"')].count("\n") + 1
        self.assertEqual(said, [
            f"apf: pack: warning: submission.c:{first}: the code reads hyperparameter "
            "'learnig_rate', which tuning_search_space.ini does not have (it gets its "
            "default); did you mean 'learning_rate'?",
            f"apf: pack: warning: submission.c:{word - 1}: the code reads hyperparameter "
            "'optimzer', which tuning_search_space.ini does not have (it gets its "
            "default); did you mean 'optimizer'?",
            f"apf: pack: warning: submission.c:{word + 1}: the code reads hyperparameter "
            "'beta2', which tuning_search_space.ini does not have (it gets its "
            "default)"])
        self.assertTrue(os.path.exists(self.path("names.apf")))

    def test_no_sources(self):
        self.refused("nosrc", None, "no C sources (*.c) to build", {"README": "none\n"})

    def test_reading_outside_the_submission_fails_the_build(self):
        # The compiler runs in the sandbox: the runner's key is not there
        # to be #included.
        key = os.path.join(self.home, "keys", "default.key.pem")
        self.assertTrue(os.path.exists(key))
        sub = self.submission("incl", GOOD + f'#include "{key}"\n')
        r = self.fails(2, "pack", sub, "-w", BLOBS, "-o", self.path("incl.apf"))
        self.assertEqual(r.err, f'apf: {sub}: does not build: sandbox fault: openat("{key}", '
                         'O_RDONLY|O_NOCTTY) outside the sandbox\n')

    def test_without_the_check_the_runner_refuses_it_the_same_way(self):
        sub = self.submission("late", GOOD.replace("int update_params(", "static int up(")
                              + "int keep(void) { return up(0, 0, 0, 0, 0, (apf_prng){0}, 0); }\n")
        entry = self.path("late.apf")
        self.ok("pack", sub, "-w", BLOBS, "-o", entry, "--no-build")
        r = self.apf("run", entry, "-o", self.path("run"), "--study", "0", "--trial", "1",
                     timeout=300)
        self.assertEqual(r.rc, 3, r)
        self.assertIn("study_0/blobs_mlp/trial_1: submission: does not define update_params", r.err)


class PackUnsealed(ApfCase):
    """pack --unsealed: the same check outside the sandbox, for a machine
    that refuses user namespaces (a chroot, some containers). This class
    runs everywhere, so the submitter there is covered too."""

    def setUp(self):
        super().setUp()
        self.ok("keygen")
        self.env["SOURCE_DATE_EPOCH"] = "1700000000"

    def sub(self, name, code):
        return PackBuild.submission(self, name, code)

    def test_the_entry_is_the_same_as_a_sealed_build_gives(self):
        sub = self.sub("good", GOOD)
        self.ok("pack", sub, "-w", BLOBS, "-o", self.path("u.apf"), "--unsealed")
        self.assertEqual(os.listdir(self.scratch), [])
        if sandbox_available():
            self.ok("pack", sub, "-w", BLOBS, "-o", self.path("s.apf"))
            with open(self.path("u.apf"), "rb") as a, open(self.path("s.apf"), "rb") as b:
                self.assertEqual(a.read(), b.read())

    def test_code_that_does_not_build_is_refused_the_same_way(self):
        line = GOOD.count("\n") + 1
        sub = self.sub("syntax", GOOD + "int broken = ;\n")
        r = self.fails(2, "pack", sub, "-w", BLOBS, "-o", self.path("x.apf"), "--unsealed")
        self.assertEqual(r.err.splitlines()[-1], f"apf: {sub}: does not build: submission.c:"
                         f"{line}:14: error: expected expression before ';' token")
        self.assertFalse(os.path.exists(self.path("x.apf")))
        sub = self.sub("noupdate", GOOD.replace("int update_params", "int update_paramz"))
        self.fails(2, "pack", sub, "-w", BLOBS, "-o", self.path("x.apf"), "--unsealed",
                   match="does not define update_params")

    def test_unsealed_and_no_build_together_is_a_usage_error(self):
        sub = self.sub("good", GOOD)
        self.fails(2, "pack", sub, "-w", BLOBS, "--unsealed", "--no-build",
                   match="give one")
