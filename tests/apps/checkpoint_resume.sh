#!/usr/bin/env bash
# ted_train's checkpoints: a run stopped by SIGTERM after step k and resumed gives, from step
# k + 1 on, the same CSV fields (loss, its parts, the held-out loss, gradient norm, learning
# rate, loss scale) as the run that never stopped, the same fingerprint, and final state files
# equal byte for byte (every weight, Adam moment and master); on 1, 4 and 8 ranks, with bf16,
# fp16 and ZeRO-1 tiles. A real SIGTERM to a running process and a SIGUSR1 to mpirun stop it
# the same way. A kill in the middle of writing a checkpoint leaves the one before it usable.
# A checkpoint of another layout or model, or a cut-short state file, is one line and exit 2.
#   checkpoint_resume.sh <ted_train> <repository root> <scratch dir> <mpirun> [case...]
set -u
train=$1
root=$2
scratch=$3
mpirun=$4
shift 4
rm -rf "$scratch" && mkdir -p "$scratch"
source "$(dirname "${BASH_SOURCE[0]}")/cli_checks.sh"
config="$root/experiments/train/tiny-cpu.yaml"
export OPENBLAS_NUM_THREADS=1 TED_NUM_THREADS=1
steps=8
common=(-c "$config" --eval-every 3 --set training.log_every=100)

launch() {  # <ranks> <ted_train arguments...>
  local ranks=$1
  shift
  if [ "$ranks" = 1 ]; then
    "$train" "$@"
  else
    "$mpirun" -n "$ranks" --oversubscribe "$train" "$@"
  fi
}

# launch in the background as the process itself (exec), so that $! is ted_train's or mpirun's
# pid and a signal sent to it reaches them, not a subshell.
launch_bg() {  # <ranks> <ted_train arguments...>
  (
    ranks=$1
    shift
    if [ "$ranks" = 1 ]; then exec "$train" "$@"; fi
    exec "$mpirun" -n "$ranks" --oversubscribe "$train" "$@"
  ) &
}

# The CSV fields a resumed run must reproduce, from step <first> on, one line per step; and the
# last row's fingerprint.
fields() {  # <csv> <first step>
  /usr/bin/python3 - "$1" "$2" <<'PY'
import csv, sys
keep = ["step", "loss", "lm_loss", "aux_loss", "valid_loss", "lr", "grad_norm", "dropped",
        "loss_scale", "skipped", "fingerprint"]
rows = list(csv.DictReader(open(sys.argv[1])))
for row in rows:
    if int(row["step"]) >= int(sys.argv[2]):
        print(",".join(row[k] for k in keep))
print("rows", len(rows))
PY
}

same_state() {  # <folder a> <folder b>: every rank's state file equal byte for byte
  local a=$1 b=$2 file
  for file in "$a"/rank_*.state; do
    cmp -s "$file" "$b/$(basename "$file")" || return 1
  done
  [ "$(ls "$a" | grep -c state)" = "$(ls "$b" | grep -c state)" ]
}

# One case: the run whole, then stopped after step <k> (by the test hook's SIGTERM in rank
# <rank>) and resumed; both with checkpoints.
case_resume() {  # <name> <ranks> <k> <rank> <ted_train options...>
  local name=$1 ranks=$2 k=$3 rank=$4
  shift 4
  local dir="$scratch/$name" rc
  mkdir -p "$dir"
  launch "$ranks" "${common[@]}" --steps "$steps" "$@" --save-dir "$dir/whole_ckpt" --csv "$dir/whole.csv" \
    >"$dir/whole.log" 2>&1 || { fail "$name: the whole run failed: $(tail -3 "$dir/whole.log")"; return; }
  TED_TEST_SIGNAL_AFTER="$k:$rank" launch "$ranks" "${common[@]}" --steps "$steps" "$@" --save-dir "$dir/ckpt" \
    --csv "$dir/stopped.csv" >"$dir/stopped.log" 2>&1
  rc=$?
  [ "$rc" = 75 ] || fail "$name: the stopped run exited $rc, expected 75: $(tail -3 "$dir/stopped.log")"
  grep -q "stopped by SIGTERM after step $k of $steps" "$dir/stopped.log" ||
    fail "$name: no stop line: $(tail -3 "$dir/stopped.log")"
  [ "$(fields "$dir/stopped.csv" 1 | tail -1)" = "rows $k" ] || fail "$name: the stopped run's CSV has not $k rows"
  launch "$ranks" "${common[@]}" --steps "$steps" "$@" --save-dir "$dir/ckpt" --resume --csv "$dir/resumed.csv" \
    >"$dir/resumed.log" 2>&1 || { fail "$name: the resumed run failed: $(tail -3 "$dir/resumed.log")"; return; }
  grep -q "resumed from .*step_$(printf %08d "$k"): $k steps done" "$dir/resumed.log" ||
    fail "$name: did not resume after step $k: $(grep resumed "$dir/resumed.log")"
  if [ "$(fields "$dir/whole.csv" 1)" != "$(fields "$dir/resumed.csv" 1)" ]; then
    fail "$name: the resumed run's steps differ from the whole run's:"
    diff <(fields "$dir/whole.csv" 1) <(fields "$dir/resumed.csv" 1) | head -6
  fi
  local last
  last=step_$(printf %08d "$steps")
  same_state "$dir/whole_ckpt/$last" "$dir/ckpt/$last" ||
    fail "$name: the final state files differ from the whole run's"
  echo "ok: $name: stopped after step $k on $ranks ranks, resumed: steps $((k + 1))-$steps," \
    "fingerprint and the final state bit for bit as the whole run"
}

# A run of 400 steps (one line a step) in the background, sent <signal> from outside once its log
# has <lines> step lines; `stopped_rc` is its exit code, 124 when the lines did not come in 120 s.
stop_after_lines() {  # <log> <lines> <signal> <ranks> <ted_train options...>
  local log=$1 lines=$2 signal=$3 ranks=$4 pid waited=0
  shift 4
  launch_bg "$ranks" "${common[@]}" --steps 400 "$@" --set training.log_every=1 >"$log" 2>&1
  pid=$!
  until [ "$(grep -c '^step' "$log" 2>/dev/null)" -ge "$lines" ]; do
    sleep 0.1
    waited=$((waited + 1))
    if [ "$waited" -ge 1200 ]; then
      kill -9 "$pid"
      wait "$pid"
      stopped_rc=124
      return
    fi
  done
  kill -"$signal" "$pid"
  stopped_rc=0
  wait "$pid" || stopped_rc=$?
}

# A real signal from outside: SIGTERM to the process (one rank), SIGUSR1 to mpirun (which passes
# it to every rank), sent once the run has made 3 steps; resumed and stopped again 2 steps later,
# the resumed steps equal to a run that was not stopped.
case_external() {  # <name> <ranks> <signal> <ted_train options...>
  local name=$1 ranks=$2 signal=$3
  shift 3
  local dir="$scratch/$name" done_steps
  mkdir -p "$dir"
  stop_after_lines "$dir/stopped.log" 3 "$signal" "$ranks" "$@" --save-dir "$dir/ckpt" \
    --csv "$dir/stopped.csv"
  [ "$stopped_rc" = 75 ] ||
    fail "$name: exited $stopped_rc after SIG$signal, expected 75: $(tail -3 "$dir/stopped.log")"
  done_steps=$(sed -n 's/^# stopped by SIG[A-Z0-9]* after step \([0-9]*\) of .*/\1/p' "$dir/stopped.log")
  [ -n "$done_steps" ] || { fail "$name: no stop line: $(tail -3 "$dir/stopped.log")"; return; }
  [ -d "$dir/ckpt/step_$(printf %08d "$done_steps")" ] || fail "$name: no checkpoint of step $done_steps"
  echo "ok: $name: SIG$signal to a running $([ "$ranks" = 1 ] && echo process || echo mpirun)" \
    "stopped it after step $done_steps with a checkpoint (exit 75)"
  local until=$((done_steps + 2))
  stop_after_lines "$dir/resumed.log" 2 "$signal" "$ranks" "$@" --save-dir "$dir/ckpt" --resume \
    --set training.save_every=0 --csv "$dir/resumed.csv"
  grep -q "resumed from .*: $done_steps steps done" "$dir/resumed.log" ||
    fail "$name: did not resume after step $done_steps"
  stop_after_lines "$dir/whole.log" "$until" "$signal" "$ranks" "$@" --csv "$dir/whole.csv"
  local a b
  a=$(fields "$dir/resumed.csv" 1 | sed -n "$((done_steps + 1)),${until}p")
  b=$(fields "$dir/whole.csv" 1 | sed -n "$((done_steps + 1)),${until}p")
  [ -n "$a" ] && [ "$a" = "$b" ] ||
    fail "$name: steps $((done_steps + 1))-$until after the resume differ: '$a' vs '$b'"
  echo "ok: $name: resumed steps $((done_steps + 1))-$until equal the uninterrupted run's"
}

# A kill while the second checkpoint's state is being written: the first stays whole and the
# run resumes from it, ending as the whole run.
case_torn_write() {  # <ranks>
  local ranks=$1 dir="$scratch/torn_np$1" rc before=$failures
  mkdir -p "$dir"
  launch "$ranks" "${common[@]}" --steps "$steps" --save-dir "$dir/whole_ckpt" --csv "$dir/whole.csv" \
    >"$dir/whole.log" 2>&1 || { fail "torn write: the whole run failed"; return; }
  TED_TEST_CRASH_WRITING=step_00000004.tmp/rank_00000.state launch "$ranks" "${common[@]}" --steps "$steps" \
    --save-dir "$dir/ckpt" --save-every 2 --csv "$dir/crashed.csv" >"$dir/crashed.log" 2>&1
  rc=$?
  [ "$rc" != 0 ] || fail "torn write: the crashing run exited 0"
  [ -d "$dir/ckpt/step_00000002" ] || fail "torn write: no complete checkpoint of step 2"
  [ -d "$dir/ckpt/step_00000004" ] && fail "torn write: a step-4 checkpoint counts as complete"
  [ -d "$dir/ckpt/step_00000004.tmp" ] || fail "torn write: the cut-short checkpoint is not there"
  launch "$ranks" "${common[@]}" --steps "$steps" --save-dir "$dir/ckpt" --resume --csv "$dir/resumed.csv" \
    >"$dir/resumed.log" 2>&1 || { fail "torn write: the resumed run failed: $(tail -3 "$dir/resumed.log")"; return; }
  grep -q "resumed from .*step_00000002: 2 steps done" "$dir/resumed.log" ||
    fail "torn write: did not resume from step 2: $(grep resumed "$dir/resumed.log")"
  [ "$(fields "$dir/whole.csv" 1)" = "$(fields "$dir/resumed.csv" 1)" ] ||
    fail "torn write: the resumed run differs from the whole run"
  same_state "$dir/whole_ckpt/step_00000008" "$dir/ckpt/step_00000008" ||
    fail "torn write: the final state differs from the whole run's"
  [ -d "$dir/ckpt/step_00000004.tmp" ] && fail "torn write: the cut-short folder was not cleared"
  [ "$failures" = "$before" ] &&
    echo "ok: torn write on $ranks ranks: killed writing step 4's checkpoint, resumed from step 2, ended as the whole run"
}

# Refusals, one line and exit 2 each, against a 4-rank checkpoint.
case_refusals() {
  local dir="$scratch/refusals"
  mkdir -p "$dir"
  launch 4 "${common[@]}" --ep 2 --steps "$steps" --save-dir "$dir/ckpt" --csv "$dir/run.csv" \
    >"$dir/run.log" 2>&1 || { fail "refusals: the run failed"; return; }
  bad_input "resume on another layout" ted_train launch 4 "${common[@]}" --steps "$steps" --ep 4 \
    --save-dir "$dir/ckpt" --resume
  says "resume on another layout" "saved on 4 ranks (T=1 Ep=2 D=2)"
  bad_input "resume on another number of ranks" ted_train launch 2 "${common[@]}" --steps "$steps" --ep 2 \
    --save-dir "$dir/ckpt" --resume
  bad_input "resume with another model" ted_train launch 4 "${common[@]}" --steps "$steps" --ep 2 \
    --set model.hidden=64 --save-dir "$dir/ckpt" --resume
  says "resume with another model" "model.hidden=32 there, 64 here"
  bad_input "resume in another precision" ted_train launch 4 "${common[@]}" --steps "$steps" --ep 2 --dtype bf16 \
    --save-dir "$dir/ckpt" --resume
  says "resume in another precision" "run.dtype=fp32 there, bf16 here"
  bad_input "load a folder that is no checkpoint" ted_train launch 4 "${common[@]}" --steps "$steps" --ep 2 \
    --load "$dir"
  says "load a folder that is no checkpoint" "has no manifest.txt"
  bad_input "resume without a save_dir" ted_train launch 1 "${common[@]}" --steps "$steps" --resume
  # A state file cut short: the rank that reads it names it, every rank leaves.
  local state="$dir/ckpt/step_00000008/rank_00003.state"
  truncate -s 100 "$state"
  bad_input "a cut-short state file" ted_train launch 4 "${common[@]}" --steps "$steps" --ep 2 \
    --save-dir "$dir/ckpt" --resume
  says "a cut-short state file" "rank_00003.state is corrupt or cut short"
}

cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(np1 np4 np8 bf16 fp16 tiles external_np1 external_np2 torn refusals)
for c in "${cases[@]}"; do
  case $c in
    np1) case_resume np1 1 3 0 ;;
    np4) case_resume np4 4 3 3 --tp 2 --ep 2 --dtd --reduce-scatter --checkpoint --cac ;;
    np8) case_resume np8 8 5 6 --tp 2 --ep 2 --dp 2 --dtd ;;
    bf16) case_resume bf16_np4 4 3 1 --ep 2 --dtype bf16 --set training.grad_dtype=bf16 ;;
    fp16) case_resume fp16_np2 2 4 1 --ep 2 --dtype fp16 ;;
    tiles) case_resume tiles_np4 4 3 2 --ep 2 --tile 1000 ;;
    external_np1) case_external external_np1 1 TERM ;;
    external_np2) case_external external_np2 2 USR1 --ep 2 ;;
    torn) case_torn_write 2 ;;
    refusals) case_refusals ;;
    *) fail "unknown case $c" ;;
  esac
done
finish
