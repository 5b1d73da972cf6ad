#!/usr/bin/env bash
# The three binaries' command lines, end to end (run by ctest, one PART each):
#   help           every `--help` (moesplit-dense, moesplit-expert-worker, every
#                  `moesplit <command>`) exits 0, lists its flags with their
#                  defaults, and agrees with the docs (README.md, docs/*.md)
#                  both ways (help_check.py); README.md links every docs/*.md;
#                  `--version` on all three prints the CMake project version.
#   errors         a misspelt flag or command gets "did you mean ...?", exit 2;
#                  bad flag values fail before any model is opened: with a
#                  model path that does not exist, the flag error comes first.
#   defaults       `moesplit plan` and moesplit-dense share their defaults
#                  (--ctx, --parallel, --kv-type): the help texts say the same,
#                  and the plan's options line matches the context and sequences
#                  the dense service reports at start-up, with and without flags.
#   up             `moesplit up` accepts the dense service's and the workers'
#                  flags (the GPU ones included) and passes them on: the command
#                  lines it starts, the services' start-up lines, one completion.
#   threads        thread counts follow the CPU affinity mask: under `taskset -c
#                  0` the worker and the dense service report 1 thread; both
#                  export moesplit_build_info{version=...} 1 on /metrics.
# Usage: cli_flags_test.sh PART BIN_DIR WORK_DIR REPO_ROOT
set -uo pipefail

PART=$1
BIN=$2
WORK=$3
REPO=$(cd "$4" && pwd)
rm -rf "$WORK"
mkdir -p "$WORK"
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null; done
  [[ -n "${KEEP_WORK:-}" ]] || rm -rf "$WORK"
}
trap cleanup EXIT

failures=0
pass() { echo "ok   $1"; }
fail() { echo "FAIL $1"; failures=$((failures + 1)); }

# run NAME PROGRAM ARGS...: keeps stdout, stderr and the exit status.
run() {
  local name=$1 prog=$2
  shift 2
  "$BIN/$prog" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err"
  echo $? >"$WORK/$name.rc"
}
rc() { cat "$WORK/$1.rc"; }
both() { cat "$WORK/$1.out" "$WORK/$1.err"; }

# A small model (the tiny preset: 4 layers, d 256, context 4096).
make_model() {
  MODEL=$WORK/tiny.gguf
  "$BIN/moesplit" make-test-model --out "$MODEL" --type Q8_0 --threads 2 >"$WORK/make.log" 2>&1 ||
    { echo "FAIL make-test-model: $(cat "$WORK/make.log")"; exit 1; }
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start NAME SECONDS PROGRAM ARGS...: runs a service in the background until
# its stderr has a "ready" line (or it exits); its stderr in $WORK/NAME.err.
start() {
  local name=$1 secs=$2 prog=$3
  shift 3
  "$BIN/$prog" "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" &
  local pid=$!
  PIDS+=("$pid")
  local deadline=$((SECONDS + secs))
  while ((SECONDS < deadline)); do
    grep -q ": ready " "$WORK/$name.err" && { LAST_PID=$pid; return 0; }
    kill -0 "$pid" 2>/dev/null || { fail "$name exited: $(cat "$WORK/$name.err")"; return 1; }
    sleep 0.1
  done
  fail "$name not ready after $secs s: $(cat "$WORK/$name.err")"
  return 1
}
stop() { kill -TERM "$1" 2>/dev/null; wait "$1" 2>/dev/null; }

# ---- help -------------------------------------------------------------------
part_help() {
  local version
  version=$(sed -n 's/^project(moesplit VERSION \([0-9.]*\).*/\1/p' "$REPO/CMakeLists.txt")
  [[ -n $version ]] || fail "no project version in CMakeLists.txt"
  local commands
  commands=$("$BIN/moesplit" --help | sed -n 's/^  \([a-z][a-z-]*\)  .*/\1/p')
  [[ $(echo "$commands" | wc -w) -ge 10 ]] || fail "moesplit --help lists too few commands: $commands"
  # The docs: README.md and the topic pages it links (docs/*.md) hold the flag
  # reference; the other READMEs' command lines are checked too (synopses).
  local -a docs=("$REPO/README.md" "$REPO"/docs/*.md)
  local -a synopses=("$REPO/deploy/README.md" "$REPO/tests/README.md" "$REPO/tests/bench/README.md")
  local f
  for f in "$REPO/docs/cli.md" "${synopses[@]}"; do [[ -f $f ]] || fail "no $f"; done
  for f in "${docs[@]:1}"; do
    grep -q "](docs/${f##*/})" "$REPO/README.md" || fail "README.md does not link docs/${f##*/}"
  done
  # PROGRAM, its binary and arguments
  local -a targets=("moesplit-dense|moesplit-dense" "moesplit-expert-worker|moesplit-expert-worker")
  for c in $commands; do targets+=("moesplit $c|moesplit $c"); done
  for t in "${targets[@]}"; do
    local program=${t%%|*} name
    name=help-${program// /-}
    # shellcheck disable=SC2086
    run "$name" ${t#*|} --help
    if [[ $(rc "$name") == 0 && ! -s "$WORK/$name.err" ]] &&
       python3 "$REPO/tests/cli/help_check.py" "$program" "$WORK/$name.out" \
         --docs "${docs[@]}" --synopses "${synopses[@]}" >"$WORK/$name.check" &&
       ! grep -qx 'synopses: 0' "$WORK/$name.check"; then
      pass "$program --help: exit 0, $(grep -c '^  -' "$WORK/$name.out") flags with defaults, as the docs say ($(cat "$WORK/$name.check"))"
    else
      fail "$program --help: rc=$(rc "$name") $(cat "$WORK/$name.check" "$WORK/$name.err")"
    fi
  done
  # -h is --help, also after other (even bad) flags.
  run h-dense moesplit-dense --parallel 0 -h
  if [[ $(rc h-dense) == 0 ]] && cmp -s "$WORK/h-dense.out" "$WORK/help-moesplit-dense.out"; then
    pass "moesplit-dense -h after a bad flag prints the help"; else fail "moesplit-dense -h: $(both h-dense)"; fi
  for prog in moesplit moesplit-dense moesplit-expert-worker; do
    run "version-$prog" "$prog" --version
    if [[ $(rc "version-$prog") == 0 ]] &&
       grep -Eq "^$prog $version \(.*\)$" "$WORK/version-$prog.out"; then
      pass "$prog --version: $(cat "$WORK/version-$prog.out")"; else
      fail "$prog --version: rc=$(rc "version-$prog") $(both "version-$prog") (want $prog $version)"; fi
  done
}

# ---- errors -----------------------------------------------------------------
# expect_error NAME "EXPECTED TEXT" PROGRAM ARGS...: exit 2, one stderr line.
expect_error() {
  local name=$1 expected=$2
  shift 2
  run "$name" "$@"
  if [[ $(rc "$name") == 2 && $(wc -l <"$WORK/$name.err") == 1 ]] &&
     grep -qF -- "$expected" "$WORK/$name.err"; then
    pass "$name: $(cat "$WORK/$name.err")"
  else
    fail "$name: rc=$(rc "$name") stderr=[$(cat "$WORK/$name.err")] want [$expected]"
  fi
}

part_errors() {
  local none=$WORK/no-such-model.gguf
  export MOESPLIT_CACHE_DIR=$WORK/cache  # `up` without --model must not get as far as writing one
  # did you mean
  expect_error dense-typo "unknown flag --modle (did you mean --model?)" moesplit-dense --modle "$none"
  expect_error dense-typo-gpu "unknown flag --gpu-memroy (did you mean --gpu-memory?)" \
    moesplit-dense --model "$none" --gpu-memroy 8GiB
  expect_error dense-one-dash "unknown flag -model (did you mean --model?)" moesplit-dense -model "$none"
  expect_error worker-typo "unknown flag --listen-shmm (did you mean --listen-shm?)" \
    moesplit-expert-worker --model "$none" --listen-shmm w
  expect_error generate-typo "unknown flag --promt (did you mean --prompt?)" \
    moesplit generate --promt hi
  expect_error up-typo "unknown flag --kv-typ (did you mean --kv-type?)" moesplit up --kv-typ q8_0
  expect_error plan-typo "unknown flag --paralel (did you mean --parallel?)" \
    moesplit plan --preset tiny --gpu-memory 8GiB --paralel 2
  expect_error command-typo "unknown command 'genrate' (did you mean generate?" moesplit genrate
  # bad values, before the (missing) model is opened
  expect_error dense-http "flag --http: expected HOST:PORT, got 'localhost' (no ':PORT')" \
    moesplit-dense --model "$none" --http localhost
  expect_error dense-http-port "port '99999' is not a number in 0..65535" \
    moesplit-dense --model "$none" --http 127.0.0.1:99999
  expect_error dense-metrics "flag --metrics: expected HOST:PORT" moesplit-dense --model "$none" --metrics 9400
  expect_error dense-parallel "flag --parallel must be in 1..1024, got 0" \
    moesplit-dense --model "$none" --parallel 0
  expect_error dense-ctx "flag --ctx must be in 16..16777216, got 1" moesplit-dense --model "$none" --ctx 1
  expect_error dense-kv "flag --kv-type must be one of f16, q8_0, q4_0; got 'q5_1'" \
    moesplit-dense --model "$none" --kv-type q5_1
  expect_error dense-backend "flag --backend must be one of auto, cpu, cuda; got 'gpu'" \
    moesplit-dense --model "$none" --backend gpu
  expect_error dense-gpu-memory "flag --gpu-memory: bad size '8XB'" \
    moesplit-dense --model "$none" --gpu-memory 8XB
  expect_error dense-expert-cache "flag --expert-cache: must be auto, off or a positive number, got 'some'" \
    moesplit-dense --model "$none" --expert-cache some
  expect_error dense-experts "flag --experts: 'tcp://h:1' is not shm://NAME or grpc://HOST:PORT" \
    moesplit-dense --model "$none" --experts tcp://h:1
  expect_error dense-template "flag --chat-template-file: cannot read '$WORK/none.jinja'" \
    moesplit-dense --model "$none" --chat-template-file "$WORK/none.jinja"
  expect_error dense-no-model "--model is required" moesplit-dense --parallel 2
  expect_error dense-positional "unexpected argument 'model.gguf'" moesplit-dense --model "$none" model.gguf
  expect_error worker-max-tokens "flag --max-tokens must be in 1..65536, got 0" \
    moesplit-expert-worker --model "$none" --listen-shm w --max-tokens 0
  expect_error worker-grpc "flag --listen-grpc: expected HOST:PORT, got '50061'" \
    moesplit-expert-worker --model "$none" --listen-grpc 50061
  expect_error worker-shard "--shard layers=x: expected A-B" \
    moesplit-expert-worker --model "$none" --listen-shm w --shard layers=x
  expect_error worker-numa "--numa must be auto, off or a node number, got 'all'" \
    moesplit-expert-worker --model "$none" --listen-shm w --numa all
  expect_error worker-memory "flag --expert-memory must be one of auto, shared, private; got 'huge'" \
    moesplit-expert-worker --model "$none" --listen-shm w --expert-memory huge
  expect_error worker-no-listen "give --listen-shm NAME and/or --listen-grpc HOST:PORT" \
    moesplit-expert-worker --model "$none"
  expect_error up-http "flag --http: expected HOST:PORT, got 'localhost'" \
    moesplit up --model "$none" --http localhost
  expect_error up-kv "flag --kv-type must be one of f16, q8_0, q4_0; got 'q5_1'" moesplit up --kv-type q5_1
  expect_error up-numa "--numa must be auto, off or a node number" moesplit up --numa every
  expect_error up-workers "flag --workers must be in 1..64, got 0" moesplit up --model "$none" --workers 0
  expect_error plan-kv "flag --kv-type must be one of f16, q8_0, q4_0; got 'q5_1'" \
    moesplit plan --model "$none" --gpu-memory 8GiB --kv-type q5_1
  expect_error plan-no-budget "--gpu-memory is required" moesplit plan --model "$none"
  # Security flags: files checked when parsing, combinations before the model is read.
  : >"$WORK/empty.pem"
  printf '# only a comment\n' >"$WORK/no-keys.txt"
  expect_error dense-key-file "holds no key" \
    moesplit-dense --model "$none" --api-key-file "$WORK/no-keys.txt"
  expect_error dense-tls-cert "flag --tls-cert: cannot read" \
    moesplit-dense --model "$none" --tls-cert "$WORK/none.pem"
  expect_error dense-tls-pair "--tls-cert and --tls-key go together" \
    moesplit-dense --model "$none" --tls-cert "$WORK/empty.pem"
  expect_error dense-tls-name "--tls-server-name applies to TLS towards workers" \
    moesplit-dense --model "$none" --tls-server-name w
  expect_error worker-tls-ca "--tls-ca (verify clients' certificates) needs --tls-cert" \
    moesplit-expert-worker --model "$none" --listen-grpc 127.0.0.1:0 --tls-ca "$WORK/empty.pem"
  expect_error worker-tls-shm "--tls-cert secures --listen-grpc" moesplit-expert-worker \
    --model "$none" --listen-shm w --tls-cert "$WORK/empty.pem" --tls-key "$WORK/empty.pem"
  expect_error up-tls-pair "--tls-cert and --tls-key go together" \
    moesplit up --model "$none" --tls-key "$WORK/empty.pem"
  if [[ ! -e $WORK/cache ]]; then pass "no test model written before the flags were checked"; else
    fail "a failed 'moesplit up' wrote $(ls "$WORK/cache")"; fi
  # With good flags the same missing model is what fails (the flags came first).
  expect_error dense-model-last "no-such-model.gguf" moesplit-dense --model "$none" --http 127.0.0.1:0
  expect_error worker-model-last "no-such-model.gguf" moesplit-expert-worker --model "$none" --listen-shm w
  expect_error up-model-last "no-such-model.gguf" moesplit up --model "$none" --kv-type q8_0
}

# ---- defaults ---------------------------------------------------------------
# default_of HELP_FILE FLAG: the "(default: X)" of FLAG's entry (help lines
# wrap onto lines indented past the names).
default_of() {
  awk '/^    / { line = line " " $0; next } { if (line != "") print line; line = $0 }
       END { print line }' "$1" |
    sed -n "s/^  $2[ ,].*(default: \([^)]*\)).*/\1/p" | head -n 1
}

part_defaults() {
  make_model
  run dhelp moesplit-dense --help
  run phelp moesplit plan --help
  local ctx parallel kv
  ctx=$(default_of "$WORK/dhelp.out" --ctx)
  parallel=$(default_of "$WORK/dhelp.out" --parallel)
  kv=$(default_of "$WORK/dhelp.out" --kv-type)
  if [[ -n $ctx && -n $parallel && -n $kv && $(default_of "$WORK/phelp.out" --ctx) == "$ctx" &&
        $(default_of "$WORK/phelp.out" --parallel) == "$parallel" &&
        $(default_of "$WORK/phelp.out" --kv-type) == "$kv" ]]; then
    pass "plan --help and moesplit-dense --help: --ctx $ctx, --parallel $parallel, --kv-type $kv"
  else
    fail "defaults differ: dense ctx=$ctx parallel=$parallel kv=$kv; plan: $(grep -E -- '--(ctx|parallel|kv-type)' "$WORK/phelp.out")"
  fi
  # Without flags, and with the same flags: plan's options line = the service's start-up line.
  local -a flagsets=("" "--ctx 256 --parallel 2")
  for flags in "${flagsets[@]}"; do
    # shellcheck disable=SC2086
    run plan moesplit plan --model "$MODEL" --gpu-memory 8GiB $flags
    # shellcheck disable=SC2086
    start dense 60 moesplit-dense --model "$MODEL" --grpc 127.0.0.1:0 --threads 1 $flags || continue
    stop "$LAST_PID"
    local planned served
    planned=$(sed -n 's/^options: *ctx \([0-9]*\) x \([0-9]*\) sequences\{0,1\},.*/\1 x \2/p' "$WORK/plan.out")
    served=$(sed -n 's/.*dense forward on .*, context \([0-9]*\) positions x \([0-9]*\) sequences.*/\1 x \2/p' \
      "$WORK/dense.err")
    [[ -z $flags ]] && first=$planned
    if [[ $(rc plan) == 0 && -n $planned && $planned == "$served" ]]; then
      pass "plan and moesplit-dense ${flags:-(defaults)}: ctx $planned sequences"
    else
      fail "plan ${flags:-(defaults)} says [$planned], the service [$served]: $(both plan) $(cat "$WORK/dense.err")"
    fi
  done
  [[ ${first:-} == "$ctx x $parallel" ]] ||
    fail "without flags plan and the service run [${first:-}], not the defaults $ctx x $parallel"
  [[ ${planned:-} == "256 x 2" ]] || fail "--ctx 256 --parallel 2 did not reach both: ${planned:-}"
}

# ---- up ---------------------------------------------------------------------
part_up() {
  make_model
  local port
  port=$(free_port)
  local -a dense_flags=(--backend cpu --gpu-memory 8GiB --kv-type q8_0 --expert-cache off
                        --prefill-stream off --step-tokens 64 --pin-experts --parallel 2 --ctx 256
                        --max-queue 3 --connect-timeout 30000 --expert-timeout 20000)
  local -a worker_flags=(--numa off --expert-memory private --max-tokens 128 --idle-timeout 60)
  run up moesplit up --model "$MODEL" --workers 2 --grpc "127.0.0.1:$port" --prompt "Hello" -n 3 \
    --threads 1 --dense-threads 1 --name "cli-up-$$" "${dense_flags[@]}" "${worker_flags[@]}"
  if [[ $(rc up) == 0 ]] && grep -q "moesplit up: 3 tokens" "$WORK/up.err"; then
    pass "up with every GPU flag: one completion"; else fail "up: rc=$(rc up) $(both up)"; fi
  local dline wlines
  dline=$(grep "^moesplit up: starting moesplit-dense " "$WORK/up.err")
  wlines=$(grep "^moesplit: starting moesplit-expert-worker " "$WORK/up.err")
  local missing=""
  for ((i = 0; i < ${#dense_flags[@]}; i++)); do
    local flag=${dense_flags[i]} value=${dense_flags[i + 1]:-}
    if [[ $value == --* || -z $value ]]; then
      [[ $dline == *" $flag=true"* ]] || missing+=" $flag"
    else
      [[ $dline == *" $flag=$value"* ]] || missing+=" $flag=$value"
      i=$((i + 1))
    fi
  done
  [[ $dline == *" --threads 1"* ]] || missing+=" --threads(dense)"
  [[ -z $missing ]] && pass "the dense service's command line has every flag: $dline" ||
    fail "the dense service's command line lacks$missing: $dline"
  missing=""
  for ((i = 0; i < ${#worker_flags[@]}; i += 2)); do
    [[ $(grep -c -- " ${worker_flags[i]}=${worker_flags[i + 1]}" <<<"$wlines") == 2 ]] ||
      missing+=" ${worker_flags[i]}"
  done
  [[ $(grep -c -- " --threads 1" <<<"$wlines") == 2 ]] || missing+=" --threads"
  [[ -z $missing ]] && pass "both workers' command lines have every worker flag" ||
    fail "the workers' command lines lack$missing: $wlines"
  # What the services say they run with.
  if grep -q "moesplit-dense: dense forward on cpu, 1 threads, context 256 positions x 2 sequences" "$WORK/up.err" &&
     [[ $(grep -c "moesplit-expert-worker: ready on .* of private memory .* 1 threads" "$WORK/up.err") == 2 ]]; then
    pass "the services run with them: $(grep -h 'dense forward on' "$WORK/up.err")"
  else
    fail "the services' start-up lines: $(grep -E 'dense forward|ready on' "$WORK/up.err")"
  fi
  # The up-only flags and the service ones are all listed by up --help.
  run uphelp moesplit up --help
  local absent=""
  for flag in "${dense_flags[@]}" "${worker_flags[@]}" --dense-threads --http --chat-template-file; do
    [[ $flag == --* ]] || continue
    grep -q -- "^  $flag[ ,]" "$WORK/uphelp.out" || absent+=" $flag"
  done
  [[ -z $absent ]] && pass "up --help lists the services' flags" || fail "up --help lacks$absent"
}

# ---- threads ----------------------------------------------------------------
part_threads() {
  make_model
  if ! taskset -c 0 true 2>/dev/null; then
    fail "taskset -c 0 does not run here"
    return
  fi
  local version
  version=$(sed -n 's/^project(moesplit VERSION \([0-9.]*\).*/\1/p' "$REPO/CMakeLists.txt")
  local name="cli-threads-$$"
  # One CPU in the mask: one thread, whatever the machine has.
  "$BIN/moesplit-expert-worker" --model "$MODEL" --listen-shm "$name" --numa off \
    --metrics 127.0.0.1:0 >/dev/null 2>"$WORK/w.err" &
  local wpid_any=$!
  PIDS+=("$wpid_any")
  local deadline=$((SECONDS + 60))
  while ((SECONDS < deadline)) && ! grep -q ": ready " "$WORK/w.err"; do sleep 0.1; done
  local all
  all=$(sed -n 's/.* \([0-9]*\) threads, loaded.*/\1/p' "$WORK/w.err")
  stop "$wpid_any"
  # At most the affinity mask's CPUs (fewer under a cgroup CPU quota).
  if [[ -n $all ]] && ((all >= 1 && all <= $(nproc))); then
    pass "worker without taskset: $all threads (nproc $(nproc))"; else
    fail "worker without taskset: [$all] threads, nproc $(nproc): $(cat "$WORK/w.err")"; fi
  taskset -c 0 "$BIN/moesplit-expert-worker" --model "$MODEL" --listen-shm "$name" --numa off \
    --metrics 127.0.0.1:0 >/dev/null 2>"$WORK/w1.err" &
  local wpid=$!
  PIDS+=("$wpid")
  deadline=$((SECONDS + 60))
  while ((SECONDS < deadline)) && ! grep -q ": ready " "$WORK/w1.err"; do sleep 0.1; done
  if grep -q "moesplit-expert-worker: ready on .*, 1 threads, loaded" "$WORK/w1.err"; then
    pass "taskset -c 0 moesplit-expert-worker: $(grep -o '[0-9]* threads' "$WORK/w1.err")"; else
    fail "taskset -c 0 moesplit-expert-worker: $(cat "$WORK/w1.err")"; fi
  local wport
  wport=$(sed -n 's/.*metrics on port \([0-9]*\).*/\1/p' "$WORK/w1.err")
  curl -sf "http://127.0.0.1:$wport/metrics" >"$WORK/w.metrics"
  if grep -Eq "^moesplit_build_info\{.*service=\"moesplit-expert-worker\".*\} 1$" "$WORK/w.metrics" &&
     grep -q "version=\"$version\"" "$WORK/w.metrics" &&
     grep -Eq '^moesplit_worker_threads(\{\})? 1$' "$WORK/w.metrics"; then
    pass "worker metrics: $(grep '^moesplit_build_info' "$WORK/w.metrics")"; else
    fail "worker metrics: $(grep -E '^moesplit_(build_info|worker_threads)' "$WORK/w.metrics")"; fi
  # The dense service under the same mask, against that worker.
  taskset -c 0 "$BIN/moesplit-dense" --model "$MODEL" --experts "shm://$name" --grpc 127.0.0.1:0 \
    --metrics 127.0.0.1:0 >/dev/null 2>"$WORK/d.err" &
  local dpid=$!
  PIDS+=("$dpid")
  deadline=$((SECONDS + 60))
  while ((SECONDS < deadline)) && ! grep -q ": ready " "$WORK/d.err"; do sleep 0.1; done
  if grep -q "moesplit-dense: dense forward on cpu, 1 threads," "$WORK/d.err"; then
    pass "taskset -c 0 moesplit-dense: $(grep 'dense forward on' "$WORK/d.err")"; else
    fail "taskset -c 0 moesplit-dense: $(cat "$WORK/d.err")"; fi
  local dport
  dport=$(sed -n 's/.*metrics on port \([0-9]*\).*/\1/p' "$WORK/d.err")
  curl -sf "http://127.0.0.1:$dport/metrics" >"$WORK/d.metrics"
  if grep -Eq "^moesplit_build_info\{.*service=\"moesplit-dense\".*version=\"$version\".*\} 1$" \
       "$WORK/d.metrics"; then
    pass "dense metrics: $(grep '^moesplit_build_info' "$WORK/d.metrics")"; else
    fail "dense metrics: $(grep '^moesplit_build_info' "$WORK/d.metrics")"; fi
  stop "$dpid"
  stop "$wpid"
}

case $PART in
  help) part_help ;;
  errors) part_errors ;;
  defaults) part_defaults ;;
  up) part_up ;;
  threads) part_threads ;;
  *) echo "unknown part $PART"; exit 2 ;;
esac
echo "----"
if [[ $failures -ne 0 ]]; then
  echo "$PART: $failures check(s) failed"
  exit 1
fi
echo "$PART: all checks passed"
