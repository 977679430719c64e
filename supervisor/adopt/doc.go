// Package adopt is the supervisor's adoption room: a directory made a
// project where it lives (Adopt), and made a plain directory again
// (Release), over the core's Host. It keeps what an adoption needs of
// its own: the copy by descriptor of a tree its owner can change, the
// mounts and mount units that show the volume at the directory's path,
// the walk for the processes that hold the directory and their services,
// and the per-member count. Each step is recorded first; as the daemon
// starts, its LoadProjects hook finishes or undoes what a crash left
// (by what the filesystem shows) and mounts the adopted volumes again.
package adopt
