"""apf pack and apf plan with every search-space form: a space no run could
draw from is refused at pack time with one line naming the file and the line
or key; a list of points (INI or AlgoPerf's JSON) gives trial N point N; the
NAdamW baseline's plan tries every feasible point in every study."""
import json
import os
import shutil
import unittest

import apftest
from apftest import ApfCase


class PackRefusesBadSpaces(ApfCase):
    def sub_with(self, name, text, trials=3):
        sub = self.make_submission()
        os.remove(os.path.join(sub, "tuning_search_space.ini"))
        self.write("sub/submission.ini",
                   "[submission]\nname = sub\nruleset = external\n\n"
                   f"[tuning]\nstudies = 2\ntrials = {trials}\n")
        self.write(f"sub/{name}", text)
        return sub

    def refused(self, name, text, match, trials=3):
        sub = self.sub_with(name, text, trials)
        r = self.fails(2, "pack", sub, "-w", "tiny", "-o", self.path("e.apf"),
                       "--no-build", match=match)
        self.assertIn(f"sub/{name}", r.err.splitlines()[-1])
        self.assertFalse(os.path.exists(self.path("e.apf")))

    def test_ini_ranges(self):
        ini = "tuning_search_space.ini"
        self.refused(ini, "[lr]\nmin = 1\nmax = 0.1\nscaling = log\n",
                     "line 3: [lr] max: must be above min")
        self.refused(ini, "[lr]\nmin = -1\nmax = 1\nscaling = log\n",
                     "line 2: [lr] min: a log scale needs min > 0")
        self.refused(ini, "[lr]\nmin = 1\nmax = 2\nscaling = logg\n",
                     "line 4: [lr] scaling: expected log or linear, got 'logg'")
        self.refused(ini, "[lr]\nmin = 1\nmax = abc\nscaling = log\n",
                     "line 3: [lr] max: expected a finite number, got 'abc'")

    def test_ini_points(self):
        ini = "tuning_search_space.ini"
        self.refused(ini, "[point 1]\nlr = 1\n[point 2]\nlr = 2\n",
                     "tuning_search_space.ini: 3 trials per study but 2 points")
        self.refused(ini, "[point 1]\nlr = 1\n[beta1]\nfeasible_points = 0.9\n",
                     "line 3: [beta1]: a search space is either all [point N] "
                     "sections or all hyperparameter sections")
        self.refused(ini, "[point 1]\nlr = 1\n[point 3]\nlr = 2\n[point 4]\nlr = 3\n",
                     "line 5: [point 4]: points are numbered 1 to 3 with no gaps "
                     "(point 2 is missing)")
        self.refused(ini, "[point 1]\nlr = 1\nwd = 1\n[point 2]\nlr = 2\n[point 3]\n"
                     "lr = 3\nwd = 3\n", "line 4: [point 2] wd: missing")
        self.refused(ini, "[point 1]\nlr = 1\n[point 2]\nlr = 2\nwd = 3\n[point 3]\n"
                     "lr = 3\n", "line 5: [point 2] wd: not in [point 1]")

    def test_json(self):
        js = "tuning_search_space.json"
        self.refused(js, '[{"lr": 1}, {"lr": 2}]',
                     "tuning_search_space.json: 3 trials per study but 2 points")
        self.refused(js, '{"lr": {"min": 1, "max": 2, "scaling": "log"}',
                     "tuning_search_space.json: line 1:")
        self.refused(js, '{"lr": {"min": 1, "max": 0.1, "scaling": "log"}}',
                     "'lr': max: must be above min")
        self.refused(js, '{"lr": {"min": -1, "max": 1, "scaling": "log"}}',
                     "'lr': min: a log scale needs min > 0")
        self.refused(js, '{"lr": {"min": 1, "max": 2, "scaling": "logg"}}',
                     "'lr': scaling: expected \"log\" or \"linear\"")
        self.refused(js, '{"lr": {"min": 1, "max": "abc", "scaling": "log"}}',
                     "'lr': max: expected a number")
        self.refused(js, '{"lr": {"min": 1, "max": 2, "scaling": "log", "step": 1}}',
                     "'lr': unknown key 'step'")
        self.refused(js, '[{"lr": 1}, {"lr": 2}, {"lr": 3, "wd": 1}]',
                     "point 3: 'wd': not in point 1")

    def test_both_files_or_none(self):
        sub = self.sub_with("tuning_search_space.json", '[{"lr": 1}, {"lr": 2}, {"lr": 3}]')
        self.write("sub/tuning_search_space.ini", "[lr]\nfeasible_points = 1\n")
        self.fails(2, "pack", sub, "-w", "tiny", "-o", self.path("e.apf"), "--no-build",
                   match="has both tuning_search_space.ini and "
                         "tuning_search_space.json; keep one")
        os.remove(os.path.join(sub, "tuning_search_space.ini"))
        os.remove(os.path.join(sub, "tuning_search_space.json"))
        self.fails(2, "pack", sub, "-w", "tiny", "-o", self.path("e.apf"), "--no-build",
                   match="external tuning needs tuning_search_space.ini or "
                         "tuning_search_space.json")

    def test_self_tuning_ignores_a_space_as_before(self):
        sub = self.make_submission(name="st", ruleset="self")
        self.write("st/tuning_search_space.json", "{not json")
        entry = self.pack(sub)
        p = json.loads(self.ok("plan", entry, "--json").out)
        self.assertTrue(all(u["hparams"] == {} for u in p["units"]))


class PlanFromPoints(ApfCase):
    POINTS = [{"learning_rate": 0.001, "one_minus_beta1": 0.1, "nesterov": True},
              {"learning_rate": 0.003, "one_minus_beta1": 0.05, "nesterov": False},
              {"learning_rate": 0.0005, "one_minus_beta1": 0.2, "nesterov": True},
              {"learning_rate": 0.01, "one_minus_beta1": 0.1, "nesterov": False}]

    def test_json_list_of_points(self):
        sub = self.make_submission()
        os.remove(os.path.join(sub, "tuning_search_space.ini"))
        text = json.dumps(self.POINTS)
        self.write("sub/tuning_search_space.json", text)
        entry = self.pack(sub)
        p = json.loads(self.ok("plan", entry, "--json").out)
        self.assertEqual(len(p["units"]), 2 * 3)
        for u in p["units"]:
            want = dict(self.POINTS[u["trial"] - 1])
            want["nesterov"] = "true" if want["nesterov"] else "false"
            self.assertEqual(u["hparams"], want, u)
        self.assertEqual(list(p["units"][0]["hparams"]),
                         ["learning_rate", "one_minus_beta1", "nesterov"])
        # The manifest's search-space digest is the JSON file's.
        import hashlib
        info = self.ok("inspect", entry).out
        self.assertIn(hashlib.sha256(text.encode()).hexdigest(), info)
        text = self.ok("plan", entry).out
        self.assertIn("learning_rate", text)
        lines = text.splitlines()
        rows = [l.split() for l in lines[2:2 + 6]]
        self.assertEqual([r[3] for r in rows], ["0.001", "0.003", "0.0005"] * 2)
        # It ends with what the six trials cost.
        self.assertTrue(lines[8].startswith("budget (--device cpu): "), lines[8:])
        self.assertIn("6 trials", lines[8])
        self.assertIn("s of submission time in all", lines[9])
        self.assertEqual(len(lines), 10)

    def test_ini_list_of_points(self):
        sub = self.make_submission()
        self.write("sub/tuning_search_space.ini",
                   "".join(f"[point {i + 1}]\nlearning_rate = {p['learning_rate']}\n"
                           f"nesterov = {'true' if p['nesterov'] else 'false'}\n"
                           for i, p in enumerate(self.POINTS)))
        p = json.loads(self.ok("plan", self.pack(sub), "--json").out)
        for u in p["units"]:
            pt = self.POINTS[u["trial"] - 1]
            self.assertEqual(u["hparams"]["learning_rate"], pt["learning_rate"])
            self.assertEqual(u["hparams"]["nesterov"], "true" if pt["nesterov"] else "false")


class BaselinePlan(ApfCase):
    def test_nadamw_plan_covers_every_feasible_point_in_each_study(self):
        sub = self.path("nadamw")
        shutil.copytree(os.path.join(apftest.ROOT, "submissions", "baselines", "nadamw"), sub)
        for seed in ("1", "2", "3"):
            entry = self.pack(sub, f"n{seed}.apf", "--seed", seed)
            p = json.loads(self.ok("plan", entry, "--json").out)
            self.assertEqual((p["studies"], p["trials"]), (3, 5))
            for study in range(3):
                units = [u for u in p["units"] if u["study"] == study]
                self.assertEqual(len(units), 5)
                ls = [u["hparams"]["label_smoothing"] for u in units]
                dr = [u["hparams"]["dropout_rate"] for u in units]
                self.assertEqual(set(ls), {0.1, 0.2}, (seed, study, ls))
                self.assertEqual(set(dr), {0.0, 0.1}, (seed, study, dr))
                # Two choices over five trials: two of one, three of the other.
                self.assertIn(sorted(ls.count(v) for v in (0.1, 0.2)), ([2, 3],))
                wd = [u["hparams"]["weight_decay"] for u in units]
                self.assertEqual(len(set(wd)), 5)
                self.assertTrue(all(5e-3 <= x <= 1.0 for x in wd))


if __name__ == "__main__":
    unittest.main()
