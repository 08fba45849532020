package web

import "net"

// Listen opens a TCP listener; ":0" or "127.0.0.1:0" picks a free port.
func Listen(addr string) (net.Listener, error) {
	return net.Listen("tcp", addr)
}
