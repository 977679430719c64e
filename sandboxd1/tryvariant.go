package sandboxd1

// TryVariantDone(s try, s variant), a signal of the manager (on
// ManagerPath): one sandbox of a Try is done, its variant and its check
// ended. It is sent to the Try's caller alone (the connection that
// called Try), never broadcast, while the call runs: before Try answers.
// try is the prefix of the Try's sandboxes' names (its Name option, or
// the try-XXXX the daemon chose); variant is a TryVariant as JSON.
const SignalTryVariantDone = "TryVariantDone"

// TryVariant is what TryVariantDone says of one sandbox of a Try: its
// place among them and its result as the report will give it, but for
// what is decided only at the end (Winner and Kept, false here) and the
// steps' output (in the report alone: a signal stays small).
type TryVariant struct {
	// Index is the sandbox's place in the report's Results (0 for
	// PREFIX-1); Of how many sandboxes the Try makes.
	Index int `json:"index"`
	Of    int `json:"of"`
	TryResult
}
