// Package coalesce is a set of names that changed, for a reader slower
// than its writers: each name is held once however often it changes
// before the reader takes it, and a one-token channel says something is
// pending. The core's change event (supervisor's Subscribe) gives one to
// each subscriber.
package coalesce
