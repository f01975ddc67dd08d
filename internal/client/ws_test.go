package client

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/airlockdev/airlock/internal/apiv1"
)

func wsOutput(kind byte, seq uint64, s string) []byte {
	b := append([]byte{kind}, binary.BigEndian.AppendUint64(nil, seq)...)
	return append(b, s...)
}

func wsText(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A fake data plane: the first connection echoes stdin as stdout, answers a
// resize with a request error and, on eof, asks the client to reconnect;
// the second (which must resume after the last seq) sends the exit.
func TestWebSocketAttach(t *testing.T) {
	var mu sync.Mutex
	var conns []string // the query of each connection
	var got []string   // what the server received
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer alt_tok" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(401)
			_, _ = w.Write(wsText(t, apiv1.Error{Code: apiv1.CodeUnauthenticated, Message: "no"}))
			return
		}
		conn, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer conn.CloseNow()
		mu.Lock()
		conns = append(conns, r.URL.RawQuery)
		n := len(conns)
		mu.Unlock()
		ctx := r.Context()
		if n > 1 {
			_ = conn.Write(ctx, websocket.MessageBinary, wsOutput(apiv1.WSStderr, 3, "late\n"))
			_ = conn.Write(ctx, websocket.MessageText, wsText(t, apiv1.WSEvent{Type: apiv1.EventExit, Seq: 4,
				ExitEventData: &apiv1.ExitEventData{ExitCode: 3}}))
			_ = conn.Close(websocket.StatusNormalClosure, "")
			return
		}
		seq := uint64(0)
		for {
			typ, data, err := conn.Read(ctx)
			if err != nil {
				return
			}
			mu.Lock()
			got = append(got, typ.String()+":"+string(data))
			mu.Unlock()
			if typ == websocket.MessageBinary {
				seq++
				_ = conn.Write(ctx, websocket.MessageBinary, wsOutput(apiv1.WSStdout, seq, string(data)))
				continue
			}
			var m apiv1.WSClientMessage
			_ = json.Unmarshal(data, &m)
			switch m.Type {
			case apiv1.WSResize:
				_ = conn.Write(ctx, websocket.MessageText, wsText(t, apiv1.WSEvent{Type: apiv1.EventError, Request: m.Type,
					Error: &apiv1.Error{Code: apiv1.CodeNoPTY, Message: "no terminal"}}))
			case apiv1.WSEOF:
				_ = conn.Write(ctx, websocket.MessageText, wsText(t, apiv1.WSEvent{Type: apiv1.EventReconnect, Seq: seq,
					ReconnectEventData: &apiv1.ReconnectEventData{Reason: "draining", RetryMS: 1}}))
				_ = conn.Close(websocket.StatusGoingAway, "")
				return
			}
		}
	}))
	defer srv.Close()
	c, err := New(srv.URL, "alk_key", WithReconnects(2))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wsURL := "ws" + strings.TrimPrefix(srv.URL, "http") + "/ws"

	if _, err := c.AttachWebSocket(ctx, wsURL, "alt_wrong", 0); !errors.As(err, new(*APIError)) {
		t.Fatalf("a refused upgrade: %v, want an *APIError", err)
	}
	w, err := c.AttachWebSocket(ctx, wsURL, "alt_tok", 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Write([]byte("hi\n")); err != nil {
		t.Fatal(err)
	}
	ev, err := w.Next()
	if err != nil || ev.Kind != apiv1.EventStdout || string(ev.Data) != "hi\n" || ev.ID != "1" {
		t.Fatalf("event %+v, %v", ev, err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(w.Resize(24, 80))
	ev, err = w.Next()
	if err != nil || ev.Kind != apiv1.EventError || ev.Request != apiv1.WSResize || ev.Err.Code != apiv1.CodeNoPTY {
		t.Fatalf("event %+v, %v; want the resize's error", ev, err)
	}
	must(w.Signal("INT"))
	must(w.CloseStdin())
	var kinds []string
	for {
		ev, err := w.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		must(err)
		kinds = append(kinds, ev.Kind+":"+string(ev.Data))
		if ev.Kind == apiv1.EventExit && ev.ExitCode != 3 {
			t.Fatalf("exit %+v", ev)
		}
	}
	if strings.Join(kinds, ",") != "stderr:late\n,exit:" {
		t.Fatalf("events after the reconnect: %q", kinds)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(conns) != 2 || conns[0] != "" || conns[1] != "after=1" {
		t.Fatalf("connections %q, want a resume after=1", conns)
	}
	want := `MessageBinary:hi
,MessageText:{"type":"resize","rows":24,"cols":80},MessageText:{"type":"signal","signal":"INT"},MessageText:{"type":"eof"}`
	if strings.Join(got, ",") != want {
		t.Fatalf("server received %q", strings.Join(got, ","))
	}
}
