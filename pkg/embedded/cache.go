package embedded

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// CachedBinary returns bin, building it first if it is not there: under an
// exclusive lock on bin+".lock", so that concurrent callers in this and
// other processes (parallel test binaries) wait for one build; build writes
// the program to the temporary path it is given, which is then renamed to
// bin, so nobody ever sees a half-written binary.
func CachedBinary(bin string, build func(out string) error) (string, error) {
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() {
		return bin, nil
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(bin+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil // built while this caller waited
	}
	out := fmt.Sprintf("%s.tmp-%d", bin, os.Getpid())
	defer os.Remove(out)
	if err := build(out); err != nil {
		return "", err
	}
	if err := os.Rename(out, bin); err != nil {
		return "", err
	}
	return bin, nil
}
