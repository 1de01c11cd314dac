package remotedialer

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sort"
	"testing"

	"github.com/gorilla/websocket"
)

func Test_encodeConnectionIDs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		size int
	}{
		{0},
		{1},
		{2},
		{10},
		{100},
		{1000},
	}
	for x := range tests {
		tt := tests[x]
		t.Run(fmt.Sprintf("%d_ids", tt.size), func(t *testing.T) {
			t.Parallel()
			ids := generateIDs(tt.size)
			encoded := encodeConnectionIDs(ids)
			decoded, err := decodeConnectionIDs(encoded)
			if err != nil {
				t.Error(err)
			}
			if got, want := decoded, ids; !reflect.DeepEqual(got, want) {
				t.Errorf("encoding and decoding differs from original data, got: %v, want: %v", got, want)
			}
		})
	}
}

func Test_diffSortedSetsGetRemoved(t *testing.T) {
	t.Parallel()
	tests := []struct {
		server, client, expected []int64
	}{
		{
			// same ids
			server:   []int64{2, 4, 6},
			client:   []int64{2, 4, 6},
			expected: nil,
		},
		{
			// Client keeps all ids from the server, additional ids are okay
			server:   []int64{1, 2, 3},
			client:   []int64{1, 2, 3, 4, 5},
			expected: nil,
		},
		{
			// Client closed some ids kept by the server
			server:   []int64{1, 2, 3, 4, 5},
			client:   []int64{1, 2, 3},
			expected: []int64{4, 5},
		},
		{
			// Combined case
			server:   []int64{1, 2, 3, 4, 5},
			client:   []int64{3, 6},
			expected: []int64{1, 2, 4, 5},
		},
	}
	for x := range tests {
		tt := tests[x]
		t.Run(fmt.Sprintf("case_%d", x), func(t *testing.T) {
			t.Parallel()
			if got, want := diffSortedSetsGetRemoved(tt.server, tt.client), tt.expected; !reflect.DeepEqual(got, want) {
				t.Errorf("unexpected result, got: %v, want: %v", got, want)
			}
		})
	}
}

func TestSession_sendSyncConnections(t *testing.T) {
	t.Parallel()

	data := make(chan []byte)
	conn := testServerWS(t, data)
	session := newSession(rand.Int63(), "sync-test", newWSConn(conn))

	for _, n := range []int{0, 5, 20} {
		ids := generateIDs(n)
		for _, id := range ids {
			session.conns[id] = nil
		}
		sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })

		if err := session.sendSyncConnections(); err != nil {
			t.Fatal(err)
		}
		message, err := newServerMessage(bytes.NewBuffer(<-data))
		if err != nil {
			t.Fatal(err)
		}
		payload, err := io.ReadAll(message.body)
		if err != nil {
			t.Fatal(err)
		}

		if got, want := message.messageType, SyncConnections; got != want {
			t.Errorf("incorrect message type, got: %v, want: %v", got, want)
		}
		if decoded, err := decodeConnectionIDs(payload); err != nil {
			t.Fatal(err)
		} else if got, want := decoded, session.activeConnectionIDs(); !reflect.DeepEqual(got, want) {
			t.Errorf("incorrect connections IDs, got: %v, want: %v", got, want)
		}
	}
}

func generateIDs(n int) []int64 {
	ids := make([]int64, n)
	for x := range ids {
		ids[x] = rand.Int63()
	}
	return ids
}

func testServerWS(t *testing.T, data chan<- []byte) *websocket.Conn {
	t.Helper()

	var upgrader websocket.Upgrader
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := upgrader.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		for {
			_, message, err := c.ReadMessage()
			if err != nil {
				return
			}
			if data != nil {
				data <- message
			}
		}
	}))
	t.Cleanup(server.Close)

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	url := "ws" + server.URL[4:] // http:// -> ws://
	conn, _, err := websocket.DefaultDialer.DialContext(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// fleet fork: a connection is closed only when two syncs in a row leave it
// out, so one opened while the client built its list survives.
func TestSession_compareAndCloseStaleConnections_closesOnlyWhatTwoSyncsLeaveOut(t *testing.T) {
	t.Parallel()

	s := newSession(rand.Int63(), "sync-test", nil)
	conns := map[int64]*connection{}
	add := func(id int64) {
		conns[id] = newConnection(id, s, "tcp", "sync-test")
		s.addConnection(id, conns[id])
	}
	for id := int64(1); id <= 4; id++ {
		add(id)
	}
	open := func(want ...int64) {
		t.Helper()
		if got := s.activeConnectionIDs(); !reflect.DeepEqual(got, want) {
			t.Errorf("open connections %v, want %v", got, want)
		}
	}

	// 3 and 4 are not in the client's list: nothing is closed yet (4 was
	// being opened while the client built it).
	s.compareAndCloseStaleConnections([]int64{1, 2})
	open(1, 2, 3, 4)

	// 5 is opened; the next list has 4 but neither 3 nor 5: 3 is closed, 5
	// is left out for the first time.
	add(5)
	s.compareAndCloseStaleConnections([]int64{1, 2, 4})
	open(1, 2, 4, 5)
	if conns[3].err != errCloseSyncConnections {
		t.Errorf("connection 3 closed with %v, want %v", conns[3].err, errCloseSyncConnections)
	}

	// Left out twice: 5 is closed.
	s.compareAndCloseStaleConnections([]int64{1, 2, 4})
	open(1, 2, 4)
	if conns[5].err != errCloseSyncConnections {
		t.Errorf("connection 5 closed with %v, want %v", conns[5].err, errCloseSyncConnections)
	}
	if conns[4].err != nil {
		t.Errorf("connection 4 closed: %v", conns[4].err)
	}
}
