package testkit

import (
	"context"
	"slices"
	"sync"

	"go.mongodb.org/mongo-driver/v2/event"
)

// Commands records the names of the commands a MongoDB client sends, in
// order: give its Monitor to the client's options, and a test counts the
// round trips of what it does (During, or Take after it).
type Commands struct {
	mu    sync.Mutex
	names []string
}

// Monitor is the command monitor that records into c.
func (c *Commands) Monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		c.mu.Lock()
		c.names = append(c.names, e.CommandName)
		c.mu.Unlock()
	}}
}

// Take returns the commands recorded since the last Take, and forgets them.
func (c *Commands) Take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.names
	c.names = nil
	return out
}

// During returns the commands sent while f ran.
func (c *Commands) During(f func()) []string {
	c.mu.Lock()
	from := len(c.names)
	c.mu.Unlock()
	f()
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.names[from:])
}
