// Package suggest finds the name a user most likely meant ("did you mean"):
// for misspelt YAML fields and command-line flags.
package suggest

import "strings"

// Nearest returns the candidate closest to typed: one that differs only in
// case, else the closest within a small edit distance (about one typo in
// four letters, at least two, and never every letter), else "".
func Nearest(typed string, candidates []string) string {
	for _, c := range candidates {
		if c != typed && strings.EqualFold(c, typed) {
			return c
		}
	}
	limit := min(max(2, len(typed)/4), len(typed)-1)
	best, bestDist := "", limit+1
	for _, c := range candidates {
		if c == typed {
			continue
		}
		if d := distance(strings.ToLower(typed), strings.ToLower(c)); d < bestDist {
			best, bestDist = c, d
		}
	}
	return best
}

// distance is the Levenshtein distance of a and b (bytes), where swapping
// two neighbouring letters counts as one edit.
func distance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
