"""End-to-end: apf run --device cuda where no GPU can be used.

apf links no CUDA: it loads build/lib/apf-cuda.so (pkg/nn/cuda_loader.c)
and asks it for a device before it makes anything. Without one, apf run
stops at once with one line that says why, whichever way the machine lacks
CUDA; with CUDA_VISIBLE_DEVICES empty no device is visible on any machine,
so the case holds on GPU machines too.
"""
import os

import apftest
from apftest import ApfCase, BLOBS


class RunDeviceCuda(ApfCase):
    def entry(self):
        # a real baseline: the refusal is the device's, not the entry's
        src = os.path.join(apftest.ROOT, "submissions", "baselines", "nadamw")
        entry = self.path("e.apf")
        self.ok("pack", src, "-w", BLOBS, "-o", entry)
        return entry

    def test_without_a_visible_device_run_names_the_reason(self):
        entry = self.entry()
        plugin = os.path.join(os.path.dirname(apftest.APF), "lib", "apf-cuda.so")
        r = self.fails(2, "run", entry, "-o", self.path("run"), "--device", "cuda",
                       env={"CUDA_VISIBLE_DEVICES": ""},
                       match="apf: run: --device cuda: ")
        last = r.err.strip().splitlines()[-1]
        if os.path.exists(plugin):
            self.assertIn("no CUDA device (driver: ", last)
        else:
            self.assertIn("this apf was built without CUDA (no ", last)
        self.assertFalse(os.path.exists(self.path("run")), "a run directory was made")

    def test_a_plugin_that_does_not_load_is_named(self):
        entry = self.entry()
        self.fails(2, "run", entry, "-o", self.path("run"), "--device", "cuda",
                   env={"APF_CUDA_PLUGIN": self.path("missing.so")},
                   match="apf: run: --device cuda: cannot load the CUDA plugin: "
                         + self.path("missing.so"))
        self.assertFalse(os.path.exists(self.path("run")), "a run directory was made")
