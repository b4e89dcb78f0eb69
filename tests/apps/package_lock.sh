#!/usr/bin/env bash
# scripts/main.sh and scripts/test.sh wait for the package lock instead of failing when another
# apt-get or dpkg holds it (scripts/common.sh). A process here holds a POSIX lock, as apt and
# dpkg do, on a stand-in lock file (TED_PACKAGE_LOCKS), and stand-ins for dpkg-query and apt-get
# on PATH report a missing package and log their arguments. Checks:
#   - ted_install_missing says it waits, calls apt-get only after the lock is released, and
#     passes DPkg::Lock::Timeout to apt-get (for a lock taken after the wait);
#   - a lock held longer than TED_PACKAGE_LOCK_WAIT: one line naming the lock, exit 2, no apt-get;
#   - with no lock held, nothing about waiting.
#   package_lock.sh <repository root>
set -u
repo=$(cd "$1" && pwd)
tmp=$(mktemp -d)
holder=
trap '[ -n "$holder" ] && kill "$holder" 2>/dev/null; rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

mkdir -p "$tmp/bin"
cat >"$tmp/bin/dpkg-query" <<'STUB'
#!/usr/bin/env bash
case " $* " in *" libcli11-dev"*) exit 1 ;; esac   # one package "missing"
echo "install ok installed"
STUB
cat >"$tmp/bin/apt-get" <<'STUB'
#!/usr/bin/env bash
echo "apt-get $* (lock held: $(cat "$TED_TEST_HELD" 2>/dev/null))" >>"$TED_TEST_LOG"
STUB
printf '#!/usr/bin/env bash\n"$@"\n' >"$tmp/bin/sudo"
chmod +x "$tmp/bin/"*
lock=$tmp/lock-frontend
: >"$lock"
hold() {  # <seconds>: hold a POSIX write lock on $lock in the background, as apt does
  echo yes >"$tmp/held"
  python3 -c "import fcntl, sys, time
f = open(sys.argv[1], 'w'); fcntl.lockf(f, fcntl.LOCK_EX); open(sys.argv[2], 'w').write('ready')
time.sleep(float(sys.argv[3])); open(sys.argv[4], 'w').write('no')" \
    "$lock" "$tmp/ready" "$1" "$tmp/held" &
  holder=$!
  while [ ! -s "$tmp/ready" ]; do sleep 0.1; done
  rm -f "$tmp/ready"
}
install() {  # runs ted_install_missing with the stand-ins; out, rc
  : >"$tmp/log"
  rc=0
  out=$(PATH="$tmp/bin:$PATH" TED_PACKAGE_LOCKS="/nonexistent $lock" TED_TEST_LOG="$tmp/log" \
    TED_TEST_HELD="$tmp/held" bash -c 'source "$1/scripts/common.sh"; ted_install_missing' _ "$repo" 2>&1) ||
    rc=$?
}

hold 3
install
wait "$holder"
[ "$rc" = 0 ] || fail "a lock held 3 s: exit $rc: $out"
grep -q "== waiting for the package lock: $lock is held" <<<"$out" || fail "a lock held 3 s: no waiting line: $out"
grep -q "apt-get .*yes" "$tmp/log" && fail "apt-get ran while the lock was held: $(cat "$tmp/log")"
grep -q "^apt-get -o DPkg::Lock::Timeout=[0-9]* update" "$tmp/log" &&
  grep -q "^apt-get -o DPkg::Lock::Timeout=[0-9]* install .*libcli11-dev" "$tmp/log" ||
  fail "apt-get update and install with DPkg::Lock::Timeout after the wait: $(cat "$tmp/log")"
echo "ok: waits for a held lock, then installs: $(grep waiting <<<"$out")"

hold 30
TED_PACKAGE_LOCK_WAIT=2 install
kill "$holder" 2>/dev/null
wait "$holder" 2>/dev/null
[ "$rc" = 2 ] && grep -q "error: the package lock $lock is still held after 2s" <<<"$out" ||
  fail "a lock held past TED_PACKAGE_LOCK_WAIT: exit $rc: $out"
[ -s "$tmp/log" ] && fail "apt-get ran though the lock was never released: $(cat "$tmp/log")"
echo "ok: gives up after TED_PACKAGE_LOCK_WAIT: $(grep error <<<"$out")"

holder=
install
[ "$rc" = 0 ] && ! grep -q waiting <<<"$out" && [ -s "$tmp/log" ] ||
  fail "no lock held: exit $rc, or a waiting line: $out"
echo "ok: no lock, no wait"

echo "$failures failed"
[ "$failures" = 0 ]
