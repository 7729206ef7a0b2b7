# Sourced by infra/test.sh: a folder of its own for one test run's temporary directories, and the clean-up of
# earlier runs' folders.
#
#   test_tmpdir PREFIX MIN_FREE_KB
#
# removes every folder PREFIX.* whose lock (PREFIX.*.lock, taken with flock) no process holds, and the single
# folder PREFIX of earlier versions of this script; then, if PREFIX's file system has MIN_FREE_KB free, makes a new
# folder PREFIX.XXXXXX, holds its lock on descriptor 9 (inherited by every process the caller starts, so it is held
# until the run's last process ends) and sets TEST_TMPDIR to it. Otherwise TEST_TMPDIR is empty. Two runs on one
# machine (two worktrees, two CI jobs, even in separate process namespaces) never remove each other's folders.
# Without flock (util-linux), nothing is made or removed.

test_tmpdir() {
  local prefix=$1 min_free_kb=$2 parent old free
  parent=$(dirname "$prefix")
  TEST_TMPDIR=
  command -v flock >/dev/null || return 0
  [ -d "$parent" ] && [ -w "$parent" ] || return 0
  rm -rf "$prefix"
  for old in "$prefix".*; do
    case "$old" in *.lock) continue ;; esac
    if [ -d "$old" ] && flock -n "$old.lock" rm -rf "$old"; then
      rm -f "$old.lock"
    fi
  done
  free=$(df -Pk "$parent" 2>/dev/null | awk 'NR == 2 {print $4}') || true
  [ -n "$free" ] && [ "$free" -gt "$min_free_kb" ] || return 0
  TEST_TMPDIR=$(mktemp -d "$prefix.XXXXXX")
  exec 9>"$TEST_TMPDIR.lock"
  flock -n 9
}
