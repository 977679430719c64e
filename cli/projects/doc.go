// Package projects is `sandboxctl project`: the projects sandboxes are
// made from, added, adopted where they live, released, listed and removed.
package projects
