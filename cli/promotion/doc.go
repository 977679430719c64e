// Package promotion is sandboxctl's verbs about promotions: promote (and
// following its stages, a line per step), promotions, approve and reject.
package promotion
