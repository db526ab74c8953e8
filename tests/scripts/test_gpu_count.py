"""scripts/params/common.sh's gpus_present: the scripts count GPUs as CUDA would, without starting Python
(each torch import cost ~2-3 s of CPU, paid by every script call before)."""
import os
import subprocess

import pytest

from tests.helpers import ROOT

SMI = """#!/usr/bin/env bash
[ "$1" = "-L" ] || exit 9
for i in $(seq 0 $(( ${FAKE_GPUS} - 1 ))); do echo "GPU $i: NVIDIA H100 80GB HBM3 (UUID: GPU-$i)"; done
"""


def _count(tmp_path, gpus, visible=None, with_smi=True):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if with_smi:
        (bin_dir / "nvidia-smi").write_text(SMI)
        (bin_dir / "nvidia-smi").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    env.update(PATH=f"{bin_dir}:/usr/bin:/bin", FAKE_GPUS=str(gpus), PYTHON="/nonexistent/python")
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    out = subprocess.run(["bash", "-c", "source scripts/params/common.sh && gpus_present"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=None)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip())


@pytest.mark.parametrize("gpus, visible, expected", [
    (8, None, 8), (0, None, 0), (8, "0,1,2,3", 4), (8, "3", 1), (8, "", 0), (8, "-1", 0), (8, "0,1,-1,2", 2),
    (2, "0,1,2,3", 2), (4, "GPU-0,GPU-2", 2), (4, " 0, 1", 2)])
def test_gpus_present_counts_like_cuda(tmp_path, gpus, visible, expected):
    assert _count(tmp_path, gpus, visible) == expected


@pytest.mark.skipif(any(n.startswith("nvidia") and n[6:].isdigit() for n in os.listdir("/dev")),
                    reason="this machine has NVIDIA devices")
def test_no_nvidia_smi_and_no_device_is_no_gpu_without_python(tmp_path):
    assert _count(tmp_path, 8, with_smi=False) == 0  # PYTHON points nowhere: it was not started
