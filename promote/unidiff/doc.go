// Package unidiff shows a change list between two trees as `git diff`
// would (Write): the text a sandbox's diff is read in, and what whoever
// approves a promotion sees of it. Both trees are snapshots of an
// untrusted sandbox: every path is resolved inside its tree and files
// reach diff(1) as descriptors, never by name.
package unidiff
