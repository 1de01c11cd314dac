package tunnel

import (
	"testing"
	"time"
)

func TestFullJitter_CappedAndGrowing(t *testing.T) {
	minB, maxB := time.Second, time.Minute
	for attempt := range 20 {
		ceil := min(minB<<min(attempt, 10), maxB)
		var top time.Duration
		for range 200 {
			d := fullJitter(minB, maxB, attempt)
			if d < minB/10 || d > ceil {
				t.Fatalf("attempt %d: wait %s outside [%s, %s]", attempt, d, minB/10, ceil)
			}
			top = max(top, d)
		}
		// Full jitter spreads over the whole range: the largest of 200
		// draws is near the ceiling.
		if top < ceil/2 {
			t.Errorf("attempt %d: largest wait %s of ceiling %s", attempt, top, ceil)
		}
	}
}
