// Package ovsdb is a minimal client of Open vSwitch's database (the OVSDB
// JSON-RPC protocol, RFC 7047) for the one setting the node agent owns
// there: other_config:flow-restore-wait of the Open_vSwitch table, which
// makes an ovs-vswitchd that starts while it is "true" forward no packet
// until it is removed. The agent sets it when it loses its bridge (so that
// a restarted vswitchd waits for egressflow's flows instead of forwarding
// pods' packets with its bare NORMAL flow) and removes it once it has
// replayed them. It reads and writes nothing else.
package ovsdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
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
	Method string          `json:"method"` // set on the server's own requests (echo)
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  json.RawMessage `json:"error"`
}

// transact runs ops as one transaction on a connection of its own and
// returns each operation's result; any operation's error fails it.
func (d Database) transact(ctx context.Context, ops ...any) ([]json.RawMessage, error) {
	network, address, ok := strings.Cut(d.Target, ":")
	if !ok || (network != "unix" && network != "tcp") {
		return nil, fmt.Errorf("ovsdb: target %q: want unix:PATH or tcp:HOST:PORT", d.Target)
	}
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, network, address)
	if err != nil {
		return nil, fmt.Errorf("ovsdb: %w", err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	const id = 1
	if err := json.NewEncoder(conn).Encode(request{ID: id, Method: "transact", Params: append([]any{"Open_vSwitch"}, ops...)}); err != nil {
		return nil, fmt.Errorf("ovsdb: send: %w", errOrCtx(ctx, err))
	}
	dec := json.NewDecoder(conn)
	for {
		var r response
		if err := dec.Decode(&r); err != nil {
			return nil, fmt.Errorf("ovsdb: read: %w", errOrCtx(ctx, err))
		}
		if r.Method == "echo" { // the server's keepalive
			if err := json.NewEncoder(conn).Encode(map[string]any{"id": r.ID, "result": r.Params, "error": nil}); err != nil {
				return nil, fmt.Errorf("ovsdb: answer echo: %w", errOrCtx(ctx, err))
			}
			continue
		}
		if n, _ := r.ID.(float64); n != id {
			continue
		}
		if len(r.Error) > 0 && string(r.Error) != "null" {
			return nil, fmt.Errorf("ovsdb: transact refused: %s", r.Error)
		}
		var results []json.RawMessage
		if err := json.Unmarshal(r.Result, &results); err != nil {
			return nil, fmt.Errorf("ovsdb: transact result %s: %w", r.Result, err)
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
}

// errOrCtx prefers the context's error: a cancelled call closes the
// connection, which the read then reports less clearly.
func errOrCtx(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return errors.Join(ctx.Err(), err)
	}
	return err
}
