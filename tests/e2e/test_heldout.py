"""apf heldout draw / verify end to end, on real signed entries.

What an auditor relies on: the draw is a function of the sealed entries
alone (any argument order gives the same bytes; another entry gives another
seed), anyone can recompute it from the documented method (done here in
Python), --seed reproduces a draw made another way, apf score takes the
draw file, and any edit to that file is caught by `apf heldout verify`.
"""
import hashlib
import json
import os
import shutil

from apftest import ApfCase, TEST_WORKLOADS

DOMAIN = b"apf-heldout-v1"


def recompute(draw):
    """The draw, from the method in apf heldout --help, in plain Python."""
    if draw["method"] == "entries":
        digests = sorted(e["manifest_sha256"] for e in draw["entries"])
        seed = hashlib.sha256(DOMAIN + "".join(digests).encode()).hexdigest()
    else:
        seed = draw["seed"]
    picks = {}
    for d in draw["draws"]:
        vs = sorted(d["variants"])
        h = hashlib.sha256(DOMAIN + b"\0" + seed.encode() + b"\0" +
                           d["base"].encode()).digest()
        picks[d["base"]] = vs[int.from_bytes(h[:8], "big") % len(vs)]
    return seed, picks


HEADER = ("accumulated_eval_time,accumulated_logging_time,"
          "accumulated_submission_time,global_step,preemption_count,score,"
          "total_duration,train/accuracy,validation/accuracy,test/accuracy,"
          "validation/num_examples,test/num_examples\n")


def evals(rows):
    out = HEADER
    for i, (t, acc) in enumerate(rows):
        out += f"1.0,0.1,{t},{i + 1},0,{t},{t + 2},{acc},{acc},{acc},100,100\n"
    return out


class HeldOut(ApfCase):
    def entry(self, name, workloads="tiny,toy", body=None):
        sub = self.make_submission(name=name, ruleset="self",
                                   extra={"submission.c": body or f"int {name};\n"})
        out = self.path(f"{name}.apf")
        # The code is a placeholder: these entries test held-out draws.
        self.ok("pack", sub, "-w", workloads, "-o", out, "--no-build")
        return out

    def draw(self, *args):
        return json.loads(self.ok("heldout", "draw", *args, "--json").out)

    def test_same_entries_same_draw_in_any_order(self):
        a, b, c = self.entry("a"), self.entry("b"), self.entry("c")
        first = self.ok("heldout", "draw", a, b, c, "--json").out
        for order in ((c, a, b), (b, c, a)):
            self.assertEqual(self.ok("heldout", "draw", *order, "--json").out, first)
        self.ok("heldout", "draw", c, b, a, "-o", self.path("d1.json"))
        self.ok("heldout", "draw", b, a, c, "-o", self.path("d2.json"))
        with open(self.path("d1.json")) as f1, open(self.path("d2.json")) as f2:
            self.assertEqual(f1.read(), f2.read())
        d = json.loads(first)
        self.assertEqual(d["method"], "entries")
        self.assertEqual([x["base"] for x in d["draws"]], ["tiny", "toy"])
        toy = next(x for x in d["draws"] if x["base"] == "toy")
        self.assertEqual(toy["variants"], ["deep", "gelu", "narrow", "tanh", "wide"])
        # The documented method, recomputed without apf, gives the same.
        seed, picks = recompute(d)
        self.assertEqual(d["seed"], seed)
        self.assertEqual({x["base"]: x["variant"] for x in d["draws"]}, picks)
        # The digests are the entries' own, as apf verify reports them.
        got = {e["manifest_sha256"] for e in d["entries"]}
        want = {json.loads(self.ok("verify", p, "--json").out)["manifest_sha256"]
                for p in (a, b, c)}
        self.assertEqual(got, want)
        # The table says the same.
        table = self.ok("heldout", "draw", a, b, c).out
        self.assertIn(d["seed"], table)
        self.assertRegex(table, r"\ntoy +%s +deep, gelu, narrow, tanh, wide\n"
                         % toy["variant"])

    def test_changing_one_entry_changes_the_seed(self):
        a, b = self.entry("a"), self.entry("b")
        before = self.draw(a, b)
        b2 = self.entry("b2", body="int b; /* one byte more */\n")
        after = self.draw(a, b2)
        self.assertNotEqual(before["seed"], after["seed"])
        self.assertEqual(recompute(after)[0], after["seed"])
        # And the seed does not depend on the file names.
        shutil.copy(a, self.path("renamed.apf"))
        self.assertEqual(self.draw(self.path("renamed.apf"), b)["seed"],
                         before["seed"])

    def test_seed_reproduces_a_draw_made_another_way(self):
        a = self.entry("a")
        one = self.draw(a, "--seed", "3")
        self.assertEqual(one["method"], "seed")
        self.assertEqual(one["seed"], "3")
        self.assertEqual(self.draw(a, "--seed", "3"), one)
        seen = set()
        for n in range(12):
            d = self.draw(a, "--seed", str(n))
            seed, picks = recompute(d)
            self.assertEqual(picks["toy"], next(x["variant"] for x in d["draws"]
                                                if x["base"] == "toy"))
            seen.add(picks["toy"])
        # Different seeds reach different variants (12 seeds, 5 variants).
        self.assertGreater(len(seen), 1)
        self.ok("heldout", "draw", a, "--seed", "3", "-o", self.path("s.json"))
        r = self.ok("heldout", "verify", self.path("s.json"), a)
        self.assertIn("given with --seed", r.out)
        for bad in ("-1", "007", "18446744073709551616", "x"):
            self.fails(2, "heldout", "draw", a, "--seed", bad, match="whole number")

    def test_score_accepts_the_draw_file(self):
        a, b = self.entry("a"), self.entry("b")
        draw_path = self.path("draw.json")
        self.ok("heldout", "draw", a, b, "-o", draw_path)
        with open(draw_path) as f:
            draw = json.load(f)
        picks = {x["base"]: x["variant"] for x in draw["draws"]}
        digests = [e["manifest_sha256"] for e in draw["entries"]]
        runs = self.path("runs")
        for sub, speed, digest in (("fast", 1.0, digests[0]), ("slow", 2.0, digests[1])):
            self.write(f"runs/{sub}/run.json", json.dumps(
                {"submission": sub, "entry": {"manifest_sha256": digest}}))
            for w in ("tiny", "toy", f"tiny_{picks['tiny']}", f"toy_{picks['toy']}"):
                self.write(f"runs/{sub}/study_0/{w}/trial_1/eval_measurements.csv",
                           evals([(speed, 0.2), (3 * speed, 0.9)]))
        r = self.ok("score", runs, "--heldout", draw_path, "--json")
        res = json.loads(r.out)
        self.assertEqual(res["base_workloads"], ["tiny", "toy"])
        self.assertEqual(sorted(res["heldout_variants"], key=lambda v: v["base"]),
                         [{"base": b, "variant": f"{b}_{v}"}
                          for b, v in sorted(picks.items())])
        scores = {s["name"]: s["score"] for s in res["submissions"]}
        self.assertEqual(scores["fast"], 1.0)
        self.assertEqual(res["heldout_binding"], "the seed of the 2 entries the runs here run")
        self.assertIn("  drawn with the seed of the 2 entries the runs here run\n",
                      self.ok("score", runs, "--heldout", draw_path).out)
        # One of the two runs alone is part of the board the draw was made
        # for: refused unless the scorer says so.
        self.fails(2, "score", self.path("runs/fast"), "--heldout", draw_path,
                   match="which no run here runs")
        self.fails(2, "score", runs, "--heldout-subset",
                   match="--heldout-subset: no held-out draw here")
        r = self.ok("score", self.path("runs/fast"), "--heldout", draw_path,
                    "--heldout-subset", "--json")
        self.assertEqual(json.loads(r.out)["heldout_binding"],
                         "the seed of 2 entries, 1 of them run here "
                         "(--heldout-subset: the others are the draw's word)")
        # Logs in AlgoPerf's layout (a published board's records) name no
        # entry: nothing to hold the draw to, and the line says so.
        for sub in ("fast", "slow"):
            os.remove(self.path(f"runs/{sub}/run.json"))
        r = self.ok("score", runs, "--heldout", draw_path, "--json")
        self.assertEqual(json.loads(r.out)["heldout_binding"],
                         "the seed of 2 entries, which no log here names (no apf run): "
                         "the draw's word")

    def test_tampering_is_caught_by_verify(self):
        a, b = self.entry("a"), self.entry("b")
        good = self.path("draw.json")
        self.ok("heldout", "draw", a, b, "-o", good)
        r = self.ok("heldout", "verify", good, b, a)
        self.assertIn("verified", r.out)
        with open(good) as f:
            d = json.load(f)
        toy = next(x for x in d["draws"] if x["base"] == "toy")
        other = next(v for v in toy["variants"] if v != toy["variant"])

        def tampered(edit, name):
            t = json.loads(json.dumps(d))
            edit(t)
            p = self.path(name)
            with open(p, "w") as f:
                json.dump(t, f, indent=2)
            return p

        def set_variant(t):
            next(x for x in t["draws"] if x["base"] == "toy")["variant"] = other
        self.fails(1, "heldout", "verify", tampered(set_variant, "v.json"), a, b,
                   match=f"toy: variant '{other}'; the draw gives '{toy['variant']}'")

        def set_seed(t):
            t["seed"] = "0" * 64
        self.fails(1, "heldout", "verify", tampered(set_seed, "s.json"), a, b,
                   match="seed 0000")

        # Claiming a given seed: the draw must still be that seed's.
        n = next(n for n in range(64)
                 if recompute({"method": "seed", "seed": str(n),
                               "draws": [toy]})[1]["toy"] != toy["variant"])

        def as_given_seed(t):
            t["method"], t["seed"] = "seed", str(n)
        self.fails(1, "heldout", "verify", tampered(as_given_seed, "m.json"), a, b,
                   match="toy: variant")

        def drop_draw(t):
            t["draws"] = [x for x in t["draws"] if x["base"] != "toy"]
        self.fails(1, "heldout", "verify", tampered(drop_draw, "d.json"), a, b,
                   match="toy: covered by the entries, but not in the draw")

        def add_variant(t):
            next(x for x in t["draws"] if x["base"] == "toy")["variants"].append("zeta")
        self.fails(1, "heldout", "verify", tampered(add_variant, "z.json"), a, b,
                   match="toy: variants [deep, gelu, narrow, tanh, wide, zeta]")
        # Other entries than the ones drawn for.
        c = self.entry("c")
        self.fails(1, "heldout", "verify", good, a, c, match="seed")
        self.fails(1, "heldout", "verify", good, a, match="seed")
        # Malformed files are input errors, not verdicts.
        self.fails(2, "heldout", "verify",
                   tampered(lambda t: t.update(extra=1), "x.json"), a, b,
                   match='unknown field "extra"')
        self.write("junk.json", "{not json")
        self.fails(2, "heldout", "verify", self.path("junk.json"), a, b)
        self.fails(2, "heldout", "verify", self.path("absent.json"), a, b)

    def test_entries_covering_different_workloads_draw_for_the_union(self):
        a = self.entry("a", workloads="tiny")
        b = self.entry("b", workloads="toy")
        r = self.ok("heldout", "draw", a, b, "-o", self.path("d.json"))
        self.assertIn("a.apf (a) does not cover toy; drawn for the union", r.err)
        self.assertIn("b.apf (b) does not cover tiny", r.err)
        with open(self.path("d.json")) as f:
            d = json.load(f)
        self.assertEqual([x["base"] for x in d["draws"]], ["tiny", "toy"])
        self.assertEqual(sorted((e["submission"], e["workloads"]) for e in d["entries"]),
                         [("a", ["tiny"]), ("b", ["toy"])])
        self.ok("heldout", "verify", self.path("d.json"), b, a)

    def test_refusals(self):
        a = self.entry("a")
        self.fails(2, "heldout", "draw", a, a, match="the same entry as")
        self.fails(2, "heldout", "draw", match="missing argument")
        self.fails(2, "heldout", match="missing subcommand")
        self.fails(2, "heldout", "toss", a, match="unknown subcommand 'toss'")
        self.fails(2, "heldout", "draw", self.path("absent.apf"))
        # Signed by a key the auditor does not trust.
        self.ok("keygen", "-o", self.path("other"))
        self.fails(1, "heldout", "draw", a, "--key", self.path("other.pub.pem"))
        # The local toy workload is not the one the entry was packed with.
        wl = self.path("workloads")
        shutil.copytree(TEST_WORKLOADS, wl)
        with open(os.path.join(wl, "toy", "workload.ini"), "a") as f:
            f.write("\n[variant.sneaky]\nhidden = 2\n")
        self.fails(2, "heldout", "draw", a, env={"APF_WORKLOADS_DIR": wl},
                   match="entries were packed against")
        # A failed write leaves neither the file nor a temporary behind.
        out = self.path("out", "d.json")
        os.makedirs(os.path.dirname(out))
        self.fails(2, "heldout", "draw", a, "-o", out, env={"APF_FAULT": "rename:1"})
        self.assertEqual(os.listdir(os.path.dirname(out)), [])
        r = self.ok("heldout", "draw", a, "-o", out)
        self.assertTrue(os.path.exists(out))
        self.assertEqual(r.err, "")
