#!/usr/bin/env bash
# Start N processes of one command on this machine the way `srun` starts the tasks of a SLURM
# job: each gets SLURM_JOB_ID, SLURM_STEP_NODELIST, SLURM_NTASKS, SLURM_PROCID and
# SLURM_LOCALID (plus JAX_COORDINATOR_PORT), so `jax.distributed.initialize()` with no
# arguments (--config.distributed.enabled=True, no coordinator_address) finds its peers by the
# same auto-detection as on a cluster. tests/test_multihost.py runs through this script.
#
#   scripts/launch_local.sh N COMMAND [ARGS...]
#
#   JAX_PLATFORMS=cpu XLA_FLAGS=--xla_force_host_platform_device_count=4 \
#     scripts/launch_local.sh 2 python scripts/train.py --workdir=/tmp/run \
#     --config=configs/base.py:task=files --config.task.files='tests/data/*.jsonl' \
#     --config.sampling.max_prompt_len=176 --config.distributed.enabled=True
#
# Process 0 prints to the terminal; every process i logs to $LAUNCH_LOG_DIR/process_i.log
# (default: a new directory under /tmp, named on stderr). When a process fails the others are
# stopped at once (the launcher names the failed process in each one's log) and the script
# exits with its status (128 + N for signal N; 143, a pre-emption's, is reported as one). On a machine with GPUs, process i uses GPU i
# (as one task per GPU under srun).
set -u
usage="usage: scripts/launch_local.sh N COMMAND [ARGS...]"
n=${1:-}
[[ $n =~ ^[1-9][0-9]*$ ]] || { echo "$usage (N, the number of processes, got '$n')" >&2; exit 2; }
shift
(($#)) || { echo "$usage" >&2; exit 2; }
logs=${LAUNCH_LOG_DIR:-$(mktemp -d /tmp/launch_local.XXXXXX)}
mkdir -p "$logs"
port=${JAX_COORDINATOR_PORT:-$(python3 -c \
  'import socket; s = socket.socket(); s.bind(("localhost", 0)); print(s.getsockname()[1])')}
echo "launch_local: $n processes, coordinator localhost:$port, logs in $logs" >&2

pids=()  # each task runs in its own session (setsid): its pid is its process group
stop_all() {
  for pid in "${pids[@]}"; do kill -- "-$pid" 2>/dev/null; done
  sleep 1
  for pid in "${pids[@]}"; do kill -9 -- "-$pid" 2>/dev/null; done
}
trap 'stop_all; exit 130' INT TERM
for ((i = 0; i < n; i++)); do
  task_env=(SLURM_JOB_ID=$$ SLURM_STEP_NODELIST=localhost SLURM_STEP_NUM_NODES=1
            SLURM_NTASKS="$n" SLURM_PROCID="$i" SLURM_LOCALID="$i" JAX_COORDINATOR_PORT="$port")
  : > "$logs/process_$i.log"  # then appended to (O_APPEND): the launcher writes there too
  if ((i == 0)); then
    setsid env "${task_env[@]}" "$@" > >(tee -a "$logs/process_0.log") 2>&1 &
  else
    setsid env "${task_env[@]}" "$@" >> "$logs/process_$i.log" 2>&1 &
  fi
  pids+=($!)
done

status=0
running=("${pids[@]}")
while ((${#running[@]})); do
  wait -n -p done_pid "${running[@]}"
  rc=$?
  running=("${running[@]/$done_pid/}")
  read -ra running <<< "${running[*]}"
  if ((rc != 0)); then
    status=$rc
    for i in "${!pids[@]}"; do [[ ${pids[$i]} == "$done_pid" ]] && failed=$i; done
    case $rc in  # 143 = 128 + SIGTERM: a pre-emption (ada_jax.preemption), not a failure
      143) what=" (pre-empted: SIGTERM; the same command resumes from the saved checkpoint)" ;;
      *) what=$( ((rc > 128)) && echo " (signal $((rc - 128)))") ;;
    esac
    why="process $failed exited with status $rc$what"
    echo "launch_local: $why; stopping the others (logs in $logs)" >&2
    for i in "${!pids[@]}"; do  # each survivor's log says why it stopped
      ((i != failed)) && echo "launch_local: $why; stopping process $i" >> "$logs/process_$i.log"
    done
    stop_all
    break
  fi
done
exit $status
