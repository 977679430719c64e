// Package userns is the policy of the sandboxes' user namespaces: whether
// sandboxes get them here (Config, Probe: the pool and the root layers
// must idmap), what every such sandbox is denied sight of (Hidden), the
// refusal when one has none (ErrNoIdmap), whether a booted one may be
// made (CanBoot), and the top directory of a sandbox's copy given to its
// owner (OwnTopDir). The blocks of ids and their maps are
// supervisor/idmap's. The core holds the probe's result and asks here;
// this package knows nothing of the core.
package userns
