package v1alpha1

import (
	"encoding/json"
	"strings"
)

// Summary is the state of one resource in Fleet's shape (what Rancher's UI
// and Fleet's CLI read in nonReadyStatus[].summary).
type Summary struct {
	// state is the resource's state: in-progress, error, removing,
	// missing, unknown.
	// +optional
	State string `json:"state,omitempty"`
	// error: the resource failed (it will not become ready by waiting).
	// +optional
	Error bool `json:"error,omitempty"`
	// transitioning: the resource is on its way (it may become ready).
	// +optional
	Transitioning bool `json:"transitioning,omitempty"`
	// message says why.
	// +optional
	// +listType=atomic
	Message []string `json:"message,omitempty"`
}

// SummaryOf turns a kstatus status ("InProgress", "Failed", "Terminating",
// "NotFound", "Unknown", "Current") and its message into a Summary.
func SummaryOf(kstatus, message string) Summary {
	var s Summary
	switch kstatus {
	case "InProgress":
		s.State, s.Transitioning = "in-progress", true
	case "Failed":
		s.State, s.Error = "error", true
	case "Terminating":
		s.State, s.Transitioning = "removing", true
	case "NotFound":
		s.State, s.Error = "missing", true
	case "Current":
		s.State = "active"
	default:
		s.State, s.Error = "unknown", true
	}
	if message != "" {
		s.Message = []string{message}
	}
	return s
}

// String is the summary in one line: "in-progress: message; message".
func (s Summary) String() string {
	if len(s.Message) == 0 {
		return s.State
	}
	return s.State + ": " + strings.Join(s.Message, "; ")
}

// UnmarshalJSON also reads the string summaries of releases before the
// object shape ("InProgress: message", "not found", "status unknown:
// ..."), so a status written by one of them still decodes; the agent
// overwrites it with the object shape at its next status write.
func (s *Summary) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var legacy string
		if err := json.Unmarshal(b, &legacy); err != nil {
			return err
		}
		*s = legacySummary(legacy)
		return nil
	}
	type plain Summary
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*s = Summary(p)
	return nil
}

func legacySummary(v string) Summary {
	switch {
	case v == "":
		return Summary{}
	case v == "not found":
		return SummaryOf("NotFound", "")
	case strings.HasPrefix(v, "status unknown: "):
		return SummaryOf("Unknown", strings.TrimPrefix(v, "status unknown: "))
	}
	status, msg, _ := strings.Cut(v, ": ")
	return SummaryOf(status, msg)
}
