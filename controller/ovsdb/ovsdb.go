// Package ovsdb is a minimal client of Open vSwitch's database (the OVSDB
// JSON-RPC protocol, RFC 7047) for the one setting the node agent owns
// there: other_config:flow-restore-wait of the Open_vSwitch table, which
// makes an ovs-vswitchd that starts while it is "true" forward no packet
// until it is removed. The agent sets it when its bridge's vswitchd dies
// (so that the restarted vswitchd waits for egressflow's flows instead of
// forwarding pods' packets with its bare NORMAL flow) and removes it once
// it has replayed them. To set it before any successor reads the database,
// it stands in line for vswitchd's own database lock (GuardSuccession). It
// reads and writes nothing else.
package ovsdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
)

// FlowRestoreWait is the other_config key of the Open_vSwitch table that
// ovs-vswitchd reads at start (and only until it is first false or
// absent): while it is "true", the datapath forwards nothing.
const FlowRestoreWait = "flow-restore-wait"

// Database is the Open_vSwitch database of one ovsdb-server.
type Database struct {
	// Target is where ovsdb-server listens: "unix:/path/db.sock" or
	// "tcp:host:port".
	Target string
}

// HoldForwarding sets flow-restore-wait to "true": a running ovs-vswitchd
// ignores it, one that starts while it is set forwards nothing until
// ReleaseForwarding.
func (d Database) HoldForwarding(ctx context.Context) error {
	_, err := d.transact(ctx, mutateOtherConfig(
		[]any{"other_config", "delete", []any{"set", []any{FlowRestoreWait}}},
		[]any{"other_config", "insert", []any{"map", []any{[]any{FlowRestoreWait, "true"}}}},
	))
	return err
}

// ReleaseForwarding removes flow-restore-wait: an ovs-vswitchd waiting on it
// starts forwarding, with the flows installed so far.
func (d Database) ReleaseForwarding(ctx context.Context) error {
	_, err := d.transact(ctx, mutateOtherConfig(
		[]any{"other_config", "delete", []any{"set", []any{FlowRestoreWait}}},
	))
	return err
}

// HoldingForwarding reports whether flow-restore-wait is "true".
func (d Database) HoldingForwarding(ctx context.Context) (bool, error) {
	results, err := d.transact(ctx, map[string]any{
		"op": "select", "table": "Open_vSwitch", "where": []any{}, "columns": []string{"other_config"},
	})
	if err != nil {
		return false, err
	}
	var selected struct {
		Rows []struct {
			OtherConfig []json.RawMessage `json:"other_config"` // ["map", [[k, v], ...]]
		} `json:"rows"`
	}
	if err := json.Unmarshal(results[0], &selected); err != nil || len(selected.Rows) != 1 || len(selected.Rows[0].OtherConfig) != 2 {
		return false, fmt.Errorf("ovsdb: unexpected Open_vSwitch row %s", results[0])
	}
	var pairs [][2]string
	if err := json.Unmarshal(selected.Rows[0].OtherConfig[1], &pairs); err != nil {
		return false, fmt.Errorf("ovsdb: other_config %s: %w", selected.Rows[0].OtherConfig[1], err)
	}
	for _, kv := range pairs {
		if kv[0] == FlowRestoreWait {
			return kv[1] == "true", nil
		}
	}
	return false, nil
}

// mutateOtherConfig is one mutate operation of the (only) Open_vSwitch row.
func mutateOtherConfig(mutations ...[]any) map[string]any {
	return map[string]any{"op": "mutate", "table": "Open_vSwitch", "where": []any{}, "mutations": mutations}
}

// request and response are JSON-RPC 1.0 messages, as OVSDB uses them.
type request struct {
	ID     any    `json:"id"`
	Method string `json:"method"`
	Params []any  `json:"params"`
}

type response struct {
	ID     any             `json:"id"`
	Method string          `json:"method"` // set on the server's own messages (echo, locked)
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
}

// session is one JSON-RPC connection to ovsdb-server, used by one
// goroutine at a time. It answers the server's echo requests itself.
type session struct {
	conn   net.Conn
	enc    *json.Encoder
	dec    *json.Decoder
	lastID int
	// notified holds the notifications read while waiting for a reply.
	notified []response
}

func (d Database) dial(ctx context.Context) (*session, error) {
	network, address, ok := strings.Cut(d.Target, ":")
	if !ok || (network != "unix" && network != "tcp") {
		return nil, fmt.Errorf("ovsdb: target %q: want unix:PATH or tcp:HOST:PORT", d.Target)
	}
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, network, address)
	if err != nil {
		return nil, fmt.Errorf("ovsdb: %w", err)
	}
	return &session{conn: conn, enc: json.NewEncoder(conn), dec: json.NewDecoder(conn)}, nil
}

// close ends the session; the server drops the locks it held or waited
// for.
func (s *session) close() { s.conn.Close() }

// read returns the next message that is not an echo request; a cancelled
// ctx closes the connection.
func (s *session) read(ctx context.Context) (response, error) {
	stop := context.AfterFunc(ctx, s.close)
	defer stop()
	for {
		var r response
		if err := s.dec.Decode(&r); err != nil {
			return r, fmt.Errorf("ovsdb: read: %w", errOrCtx(ctx, err))
		}
		if r.Method != "echo" { // the server's keepalive
			return r, nil
		}
		if err := s.enc.Encode(map[string]any{"id": r.ID, "result": r.Params, "error": nil}); err != nil {
			return r, fmt.Errorf("ovsdb: answer echo: %w", errOrCtx(ctx, err))
		}
	}
}

// call sends one request and returns its result, keeping the
// notifications that arrive meanwhile for awaitNotification.
func (s *session) call(ctx context.Context, method string, params ...any) (json.RawMessage, error) {
	s.lastID++
	id := s.lastID
	stop := context.AfterFunc(ctx, s.close)
	err := s.enc.Encode(request{ID: id, Method: method, Params: params})
	stop()
	if err != nil {
		return nil, fmt.Errorf("ovsdb: send %s: %w", method, errOrCtx(ctx, err))
	}
	for {
		r, err := s.read(ctx)
		if err != nil {
			return nil, err
		}
		if r.ID == nil {
			s.notified = append(s.notified, r)
			continue
		}
		if n, _ := r.ID.(float64); n != float64(id) {
			continue
		}
		if len(r.Error) > 0 && string(r.Error) != "null" {
			return nil, fmt.Errorf("ovsdb: %s refused: %s", method, r.Error)
		}
		return r.Result, nil
	}
}

// awaitNotification waits for the server's notification method about
// name (such as "locked"), or returns one that call has already read.
func (s *session) awaitNotification(ctx context.Context, method, name string) error {
	about := func(r response) bool {
		var params []string
		return r.Method == method && json.Unmarshal(r.Params, &params) == nil && len(params) == 1 && params[0] == name
	}
	for i, r := range s.notified {
		if about(r) {
			s.notified = slices.Delete(s.notified, i, i+1)
			return nil
		}
	}
	for {
		r, err := s.read(ctx)
		if err != nil {
			return err
		}
		if r.ID == nil && about(r) {
			return nil
		}
	}
}

// transact runs ops as one transaction on a connection of its own and
// returns each operation's result; any operation's error fails it.
func (d Database) transact(ctx context.Context, ops ...any) ([]json.RawMessage, error) {
	s, err := d.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer s.close()
	result, err := s.call(ctx, "transact", append([]any{"Open_vSwitch"}, ops...)...)
	if err != nil {
		return nil, err
	}
	var results []json.RawMessage
	if err := json.Unmarshal(result, &results); err != nil {
		return nil, fmt.Errorf("ovsdb: transact result %s: %w", result, err)
	}
	for i, res := range results {
		var opErr struct {
			Error   string `json:"error"`
			Details string `json:"details"`
		}
		if json.Unmarshal(res, &opErr) == nil && opErr.Error != "" {
			return nil, fmt.Errorf("ovsdb: operation %d: %s: %s", i, opErr.Error, opErr.Details)
		}
	}
	if len(results) < len(ops) {
		return nil, fmt.Errorf("ovsdb: %d results for %d operations", len(results), len(ops))
	}
	return results, nil
}

// errOrCtx prefers the context's error: a cancelled call closes the
// connection, which the read then reports less clearly.
func errOrCtx(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return errors.Join(ctx.Err(), err)
	}
	return err
}
