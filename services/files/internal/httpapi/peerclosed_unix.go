//go:build unix

package httpapi

import (
	"errors"
	"net"
	"syscall"
)

// peerClosed reports whether the client has closed its side of conn (a
// FIN or a reset is waiting and no data), looking without consuming.
func peerClosed(conn net.Conn) bool {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	closed := false
	_ = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case err == nil:
			closed = n == 0
		case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EWOULDBLOCK), errors.Is(err, syscall.EINTR):
		default: // ECONNRESET and the like
			closed = true
		}
		return true
	})
	return closed
}
