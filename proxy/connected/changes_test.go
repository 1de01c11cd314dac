package connected

import (
	"testing"
	"time"
)

// The tunnel server's session changes reach the Reporter through Changes: a
// session that starts queues its Cluster at once; the last one ending
// queues it only after the grace (an agent that reconnects meanwhile does
// not flap the condition), and one ending while others remain queues
// nothing.
func TestChanges_QueueWhatTheReporterDecidesOn(t *testing.T) {
	at := time.Unix(1_000_000, 0)
	c := NewChanges(100*time.Millisecond, func() time.Time { return at })
	defer c.queue.ShutDown()

	c.Disconnected("ws/a", 1)
	if n := c.queue.Len(); n != 0 {
		t.Fatalf("a session ended while another remains: %d queued", n)
	}
	c.Disconnected("ws/a", 0)
	c.mu.Lock()
	down, ok := c.down["ws/a"]
	c.mu.Unlock()
	if !ok || !down.Equal(at) {
		t.Fatalf("the last session's end is not recorded (%v, %v)", down, ok)
	}
	if n := c.queue.Len(); n != 0 {
		t.Fatalf("queued before the grace: %d", n)
	}
	deadline := time.Now().Add(10 * time.Second)
	for c.queue.Len() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("not queued 10s after a grace of 100ms")
		}
		time.Sleep(10 * time.Millisecond)
	}

	c.Connected("ws/a", 1)
	c.mu.Lock()
	_, ok = c.down["ws/a"]
	c.mu.Unlock()
	if ok {
		t.Error("a session that started again leaves its Cluster marked down")
	}
	if n := c.queue.Len(); n != 1 {
		t.Errorf("%d queued, want ws/a once", n)
	}
}
