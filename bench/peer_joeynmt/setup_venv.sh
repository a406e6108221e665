#!/usr/bin/env bash
# Creates the peer benchmark's own virtual environment (bench/peer_joeynmt/.venv,
# ignored by git) with JoeyNMT 2.3 on the CPU build of PyTorch 2.13.0.
#
# torch is installed first and alone, so that JoeyNMT's `torch>=1.12.0`
# requirement is met by it and pip never resolves a CUDA build; the script then
# checks that exactly one torch, the CPU one, is installed and that no NVIDIA
# wheel came along. JoeyNMT 2.3 imports `importlib_metadata` without declaring
# it, and sentencepiece is pinned to the release the project uses (0.2.0).
#
# Usage: bash bench/peer_joeynmt/setup_venv.sh [PYTHON]   (default: python3)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$here/.venv"
python="${1:-python3}"

if [[ ! -x "$venv/bin/python" ]]; then
    "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip install --disable-pip-version-check -q)

"${pip[@]}" "torch==2.13.0"
"${pip[@]}" "joeynmt==2.3.0" "importlib_metadata" "sentencepiece==0.2.0"

"$venv/bin/python" - <<'PY'
import importlib.metadata as md
import sys

import torch

names = sorted(d.metadata["Name"] for d in md.distributions())
cuda = [n for n in names if n.lower().startswith("nvidia") or n.lower() == "triton"]
torches = [d.version for d in md.distributions() if d.metadata["Name"].lower() == "torch"]
problems = []
if len(torches) != 1 or not torches[0].startswith("2.13.0"):
    problems.append(f"expected one torch 2.13.0, found {torches}")
if torch.version.cuda is not None:
    problems.append(f"torch is a CUDA build ({torch.version.cuda}), expected the CPU build")
if cuda:
    problems.append(f"CUDA wheels were pulled in: {cuda}")
if problems:
    sys.exit("peer venv: " + "; ".join(problems))
print(f"peer venv ready: torch {torch.__version__} (CPU), joeynmt {md.version('joeynmt')}, "
      f"sentencepiece {md.version('sentencepiece')}")
PY
