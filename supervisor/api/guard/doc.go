// Package guard is the daemon's bus connection's first reader: an
// interceptor godbus runs on every message as it is read, before any
// handler, audit line or log sees it. It closes the descriptors no
// handler will take, refuses calls whose arguments are too large or that
// carry descriptors their method does not take, and answers an input for
// a full session at once, by rewriting the message into a call of the
// refusal object (Refuser) that the server exports.
package guard
