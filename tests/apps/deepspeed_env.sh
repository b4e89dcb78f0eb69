# shellcheck shell=bash
# Sourced by the tests that need the DeepSpeed baseline's Python environment
# (baselines/deepspeed/setup.sh: torch, DeepSpeed, megatron-core, tokenizers): sets `venv`, or
# exits 77 (skipped, with the reason) where it cannot be installed, TED_SKIP_DEEPSPEED set or no
# package registry; any other failure of the setup ends the test with the setup's exit code.
#   source_dir=<repository root>; source tests/apps/deepspeed_env.sh
if [ -n "${TED_SKIP_DEEPSPEED:-}" ]; then
  echo "SKIPPED: TED_SKIP_DEEPSPEED is set: the DeepSpeed environment is not installed"
  exit 77
fi
ted_env_start=$(date +%s)
ted_env_rc=0
venv=$("$source_dir/baselines/deepspeed/setup.sh" | tail -1) || ted_env_rc=$?
if [ "$ted_env_rc" = 3 ]; then
  echo "SKIPPED: the package registry cannot be reached, so the DeepSpeed environment" \
    "(baselines/deepspeed/requirements.txt) cannot be installed"
  exit 77
fi
[ "$ted_env_rc" = 0 ] || exit "$ted_env_rc"
echo "# environment ready in $(($(date +%s) - ted_env_start)) s: $venv"
