// Package state keeps sandboxd's records of its sandboxes in a bbolt
// database under the state directory. Every change is one transaction, so
// a crash leaves each record as it was before or after the change, never
// between; the lifecycle writes a record's intent (creating, destroying)
// before it touches the filesystem or systemd, so that the reconcile at
// the next start knows what to finish or undo.
//
// Each record is mirrored, after its transaction, as a small JSON file in
// records/ beside the database (written to a temporary name, synced,
// renamed). A database that is corrupt is moved aside, never deleted, and
// the store is rebuilt from the mirror; so is one that went missing. A
// lost database must not make the daemon take every sandbox for an orphan.
//
// The projects added at run time (AddProject) are kept the same way, in
// their own bucket and mirrored in projects/: a lost database must not
// make them vanish either, or their sandboxes would be of unknown projects.
package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// Lifecycle states of a sandbox.
type State string

const (
	Creating   State = "creating"   // intent written; volumes or scope may be half made
	Ready      State = "ready"      // volumes and scope exist; nothing runs in it yet
	Running    State = "running"    // a command runs in it
	Frozen     State = "frozen"     // its processes are stopped
	Stopped    State = "stopped"    // its scope is gone; its volumes stay
	Promoting  State = "promoting"  // its changes are being applied to a stage
	Destroying State = "destroying" // intent written; the record goes last
)

// Record is what the daemon remembers of one sandbox.
type Record struct {
	ID      string    `json:"id"`
	Name    string    `json:"name,omitempty"` // its creator's name for it ("": none); the supervisor keeps names unique
	Project string    `json:"project"`
	Owner   uint32    `json:"owner"` // uid of the caller that made it
	State   State     `json:"state"`
	Base    string    `json:"base"`   // the base volume's name
	Volume  string    `json:"volume"` // the sandbox volume's name
	Unit    string    `json:"unit"`   // its systemd scope
	Profile string    `json:"profile,omitempty"`
	Created time.Time `json:"created"`
	Expires time.Time `json:"expires,omitzero"` // end of its time to live
	// ProjectLocation is where the project was when the sandbox was made
	// (its btrfs path or dataset): its base is of that volume, so a
	// project of the same name elsewhere is not its project ("": made
	// before it was recorded).
	ProjectLocation string `json:"project_location,omitempty"`
	// Limits as the caller asked for them, kept verbatim for inspection
	// and for restarting the scope.
	Limits json.RawMessage `json:"limits,omitempty"`
	// DiskQuota bounds what the sandbox writes, in bytes (0: none).
	DiskQuota uint64 `json:"disk_quota,omitempty"`
	// The sandbox's world, as its init builds it again after a reboot:
	// Network is none, allowlist (through Allow) or host.
	Network         string   `json:"network,omitempty"`
	Allow           []string `json:"allow,omitempty"`
	ReadOnlyProject bool     `json:"readonly_project,omitempty"`
	Hidden          []string `json:"hidden,omitempty"`
	ReadOnly        []string `json:"readonly,omitempty"`
	// Layer is the volume of its system layer ("": a tmpfs).
	Layer string `json:"layer,omitempty"`
	// NoCache: it has no owner's cache (a promotion's check sandbox).
	NoCache bool `json:"no_cache,omitempty"`
	// Boot: it runs a systemd of its own (CreateOptions.Boot).
	Boot bool `json:"boot,omitempty"`
	// Pool: a warm pool's ready sandbox, nobody's until a create claims
	// it (supervisor/pool); callers do not see it.
	Pool bool `json:"pool,omitempty"`
	// Env is its project's environment (KEY=value: its units' and its
	// env entries), read when it was made: every command in it gets it,
	// under the caller's own.
	Env []string `json:"env,omitempty"`
	// FrozenIdle: it is frozen for being idle (not by a caller), and the
	// next call that needs it, or connection to a port of its, thaws it.
	FrozenIdle bool `json:"frozen_idle,omitempty"`
	// StoppedIdle: it is stopped for being idle (not by a caller), and
	// the next call that needs it, or connection to a port of its,
	// starts it.
	StoppedIdle bool `json:"stopped_idle,omitempty"`
	// Checkpoints are its named read-only snapshots, oldest first.
	Checkpoints []Checkpoint `json:"checkpoints,omitempty"`
	// IDs is its user namespace (nil: none, its root is the host's). The
	// record holds the ids for as long as it exists, so that no other
	// sandbox gets them, also after a crash.
	IDs *IDMap `json:"ids,omitempty"`
	// Ports are the ports it exposes on the host (ExposePort), in the
	// order exposed: the daemon exposes them again when it starts.
	Ports []Port `json:"ports,omitempty"`
	// Processes are the background processes declared to start again
	// each time it starts (Spawn with Restart), in the order declared.
	Processes []Process `json:"processes,omitempty"`
}

// Port is a port of a sandbox that the daemon exposes on the host.
type Port struct {
	Port uint16 `json:"port"`
	// TCP: also on a loopback TCP port, whose number the kernel picks
	// anew each time the daemon exposes it.
	TCP bool `json:"tcp,omitempty"`
}

// Runs reports whether the sandbox is ready or running: its init answers
// and may start commands (not frozen, stopped, or on its way in or out).
func (r Record) Runs() bool { return r.State == Ready || r.State == Running }

// IDMap is a sandbox's user namespace: Base is the first of the block of
// host ids it holds, the extents map ids inside it to ids in the block.
type IDMap struct {
	Base uint32     `json:"base"`
	UIDs []IDExtent `json:"uids"`
	GIDs []IDExtent `json:"gids"`
}

// IDExtent maps Count ids from Inside to Host.
type IDExtent struct {
	Inside uint32 `json:"inside"`
	Host   uint32 `json:"host"`
	Count  uint32 `json:"count"`
}

// Checkpoint is a named read-only snapshot of a sandbox.
type Checkpoint struct {
	Name    string    `json:"name"`
	Created time.Time `json:"created"`
	// Layer: the system layer is in it too (not where the layer is a
	// tmpfs).
	Layer bool `json:"layer,omitempty"`
}

var (
	// ErrNotFound: no record with that id.
	ErrNotFound = errors.New("no such sandbox")
	// ErrExists: a record with that id is there already.
	ErrExists = errors.New("sandbox id already used")
	// ErrLocked: another process (a second daemon) holds the database.
	ErrLocked = errors.New("state database is in use by another process")
	// ErrCorrupt: the database file cannot be read.
	ErrCorrupt = errors.New("state database is corrupt")
	// ErrNoProject: no added project of that name is recorded.
	ErrNoProject = errors.New("no such project recorded")
	// ErrProjectExists: an added project of that name is recorded already.
	ErrProjectExists = errors.New("project already recorded")
)

var (
	bucket         = []byte("sandboxes")
	projectsBucket = []byte("projects")
)

// Project is a project added at run time: its name and its location in
// the pool (a btrfs subvolume path or a ZFS dataset). The configuration's
// projects are not recorded here: the configuration file is theirs.
type Project struct {
	Name     string    `json:"name"`
	Location string    `json:"location"`
	Added    time.Time `json:"added"`
	// Users and Groups (names or numeric ids) may use the project besides
	// root and admins; with neither, its directory's owner (and its group
	// if group-writable) may.
	Users  []string `json:"users,omitempty"`
	Groups []string `json:"groups,omitempty"`
	// Adoption: a project made of a directory where it lives (AdoptProject).
	Adoption *Adoption `json:"adoption,omitempty"`
	// Freeze are host services (units) that write the project: frozen
	// while a sandbox's base is snapshotted, so that what they wrote in
	// its directories is at one point of theirs.
	Freeze []string `json:"freeze,omitempty"`
}

// Store is the open database.
type Store struct {
	db *bolt.DB
	// writes orders the record's changes and their entries alike; mu
	// guards entries, which Entries reads meanwhile.
	writes   sync.Mutex
	mu       sync.Mutex
	entries  []Entry // every record's, in List's order
	path     string
	mirror   string // records/ beside the database
	projects string // projects/ beside the database: the projects' mirror
	// promotions/ beside the database: the promotions' mirror.
	promotions string
	recover    Recovery
}

// Recovery says what Open had to do to a database it could not use.
type Recovery struct {
	// CorruptMovedTo is where a corrupt database was moved ("" if none).
	CorruptMovedTo string
	// Rebuilt is how many records were read back from the mirror, and
	// Projects how many added projects.
	Rebuilt    int
	Projects   int
	Promotions int
}

// Recovery tells what Open found and did (nothing, usually).
func (s *Store) Recovery() Recovery { return s.recover }

// Open opens (making it if missing) the database at path. Another daemon
// holding it is ErrLocked after lockWait. A file that is not a database is
// moved aside (path.corrupt-TIME, for the operator) and, like a missing
// database, rebuilt from the mirror; Recovery says so.
func Open(path string, lockWait time.Duration) (*Store, error) {
	mirror := filepath.Join(filepath.Dir(path), "records")
	projects := filepath.Join(filepath.Dir(path), "projects")
	promotions := filepath.Join(filepath.Dir(path), "promotions")
	for _, dir := range []string{mirror, projects, promotions} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("opening state %s: %w", path, err)
		}
	}
	var rec Recovery
	_, statErr := os.Stat(path)
	fresh := errors.Is(statErr, os.ErrNotExist)
	db, err := openDB(path, lockWait)
	if errors.Is(err, ErrCorrupt) {
		aside := fmt.Sprintf("%s.corrupt-%d", path, time.Now().Unix())
		if rerr := os.Rename(path, aside); rerr != nil {
			return nil, fmt.Errorf("%w; moving it aside: %w", err, rerr)
		}
		rec.CorruptMovedTo = aside
		fresh = true
		db, err = openDB(path, lockWait)
	}
	if err != nil {
		return nil, err
	}
	s := &Store{db: db, path: path, mirror: mirror, projects: projects, promotions: promotions}
	if fresh {
		if rec.Rebuilt, err = s.rebuild(); err != nil {
			db.Close()
			return nil, fmt.Errorf("rebuilding state %s from %s: %w", path, mirror, err)
		}
		if rec.Projects, err = s.rebuildProjects(); err != nil {
			db.Close()
			return nil, fmt.Errorf("rebuilding state %s from %s: %w", path, projects, err)
		}
		if rec.Promotions, err = s.rebuildPromotions(); err != nil {
			db.Close()
			return nil, fmt.Errorf("rebuilding state %s from %s: %w", path, promotions, err)
		}
	}
	s.recover = rec
	if err := s.loadEntries(); err != nil {
		db.Close()
		return nil, fmt.Errorf("opening state %s: %w", path, err)
	}
	return s, nil
}

func openDB(path string, lockWait time.Duration) (*bolt.DB, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: lockWait})
	switch {
	case errors.Is(err, bolterrors.ErrTimeout):
		return nil, fmt.Errorf("opening state %s: %w", path, ErrLocked)
	case errors.Is(err, bolterrors.ErrInvalid) || errors.Is(err, bolterrors.ErrVersionMismatch) || errors.Is(err, bolterrors.ErrChecksum):
		return nil, fmt.Errorf("opening state %s: %w: %w", path, ErrCorrupt, err)
	case err != nil:
		return nil, fmt.Errorf("opening state %s: %w", path, err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucket, projectsBucket, promotionsBucket} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		db.Close()
		return nil, fmt.Errorf("opening state %s: %w", path, err)
	}
	return db, nil
}

// rebuild loads every mirrored record into the (new) database.
func (s *Store) rebuild() (int, error) {
	return rebuildBucket(s.db, s.mirror, bucket, func(data []byte) string {
		var r Record
		if json.Unmarshal(data, &r) != nil {
			return ""
		}
		return r.ID
	})
}

// rebuildBucket loads each mirror file NAME.json of dir into bkt under
// NAME, if keyOf (the key the file's own content says) agrees; a file
// that does not is left out: unreadable, or a temporary file a crash left.
func rebuildBucket(db *bolt.DB, dir string, bkt []byte, keyOf func([]byte) string) (int, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	n := 0
	err = db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bkt)
		for _, e := range entries {
			key, ok := strings.CutSuffix(e.Name(), ".json")
			if !ok {
				continue
			}
			data, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				return err
			}
			if keyOf(data) != key {
				continue
			}
			if err := b.Put([]byte(key), data); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}

// mirrorPut writes r's mirror file atomically.
func (s *Store) mirrorPut(r Record) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := writeAtomic(filepath.Join(s.mirror, r.ID+".json"), data); err != nil {
		return fmt.Errorf("mirroring sandbox %s: %w", r.ID, err)
	}
	return nil
}

// writeAtomic writes data to final through a temporary file, synced and
// then renamed: a crash leaves the old file or the new one, never half.
func writeAtomic(final string, data []byte) error {
	tmp := final + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, final)
}

func (s *Store) mirrorDelete(id string) error {
	err := os.Remove(filepath.Join(s.mirror, id+".json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Create adds a new record; its id must be unused.
func (s *Store) Create(r Record) error {
	s.writes.Lock()
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		if b.Get([]byte(r.ID)) != nil {
			return fmt.Errorf("recording sandbox %s: %w", r.ID, ErrExists)
		}
		return put(b, r)
	})
	if err == nil {
		s.setEntry(r)
	}
	s.writes.Unlock()
	if err != nil {
		return err
	}
	return s.mirrorPut(r)
}

// Update changes the record id with fn, in one transaction: fn's error
// leaves the record as it was.
func (s *Store) Update(id string, fn func(*Record) error) (Record, error) {
	var out Record
	s.writes.Lock()
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		r, err := get(b, id)
		if err != nil {
			return err
		}
		if err := fn(&r); err != nil {
			return err
		}
		r.ID = id // the key is not the caller's to change
		out = r
		return put(b, r)
	})
	if err == nil {
		s.setEntry(out)
	}
	s.writes.Unlock()
	if err != nil {
		return out, err
	}
	return out, s.mirrorPut(out)
}

// Get returns the record id.
func (s *Store) Get(id string) (Record, error) {
	var r Record
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		r, err = get(tx.Bucket(bucket), id)
		return err
	})
	return r, err
}

// List returns every record, oldest first.
func (s *Store) List() ([]Record, error) {
	var out []Record
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).ForEach(func(k, v []byte) error {
			var r Record
			if err := json.Unmarshal(v, &r); err != nil {
				return fmt.Errorf("reading record %s: %w: %w", k, ErrCorrupt, err)
			}
			out = append(out, r)
			return nil
		})
	})
	// Stable: records of the same time stay in key (id) order, as Entries.
	sort.SliceStable(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out, err
}

// Delete removes the record id (the last step of a destroy).
func (s *Store) Delete(id string) error {
	s.writes.Lock()
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		if b.Get([]byte(id)) == nil {
			return fmt.Errorf("deleting sandbox %s: %w", id, ErrNotFound)
		}
		return b.Delete([]byte(id))
	})
	if err == nil {
		s.dropEntry(id)
	}
	s.writes.Unlock()
	if err != nil {
		return err
	}
	return s.mirrorDelete(id)
}

func get(b *bolt.Bucket, id string) (Record, error) {
	var r Record
	v := b.Get([]byte(id))
	if v == nil {
		return r, fmt.Errorf("sandbox %s: %w", id, ErrNotFound)
	}
	if err := json.Unmarshal(v, &r); err != nil {
		return r, fmt.Errorf("reading sandbox %s: %w: %w", id, ErrCorrupt, err)
	}
	return r, nil
}

func put(b *bolt.Bucket, r Record) error {
	if r.ID == "" {
		return errors.New("recording a sandbox: empty id")
	}
	data, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("recording sandbox %s: %w", r.ID, err)
	}
	return b.Put([]byte(r.ID), data)
}

// AddProject records p, a project added at run time, then mirrors it; a
// project of that name must not be recorded already.
func (s *Store) AddProject(p Project) error {
	// The name is also the mirror's file name.
	if p.Name == "" || p.Name[0] == '.' || strings.ContainsAny(p.Name, "/\x00") {
		return fmt.Errorf("recording project %q: not a usable name", p.Name)
	}
	data, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("recording project %s: %w", p.Name, err)
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(projectsBucket)
		if b.Get([]byte(p.Name)) != nil {
			return fmt.Errorf("recording project %s: %w", p.Name, ErrProjectExists)
		}
		return b.Put([]byte(p.Name), data)
	})
	if err != nil {
		return err
	}
	if err := writeAtomic(filepath.Join(s.projects, p.Name+".json"), data); err != nil {
		// Undone, so that a failed add leaves nothing: the caller was told
		// it failed, and must not find the project after a restart.
		uerr := s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(projectsBucket).Delete([]byte(p.Name)) })
		return errors.Join(fmt.Errorf("mirroring project %s: %w", p.Name, err), uerr)
	}
	return nil
}

// UpdateProject records p over the recorded project of its name, then
// mirrors it.
func (s *Store) UpdateProject(p Project) error {
	data, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("recording project %s: %w", p.Name, err)
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(projectsBucket)
		if b.Get([]byte(p.Name)) == nil {
			return fmt.Errorf("recording project %s: %w", p.Name, ErrNoProject)
		}
		return b.Put([]byte(p.Name), data)
	})
	if err != nil {
		return err
	}
	if err := writeAtomic(filepath.Join(s.projects, p.Name+".json"), data); err != nil {
		return fmt.Errorf("mirroring project %s: %w", p.Name, err)
	}
	return nil
}

// Projects returns the projects added at run time, by name.
func (s *Store) Projects() ([]Project, error) {
	var out []Project
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(projectsBucket).ForEach(func(k, v []byte) error {
			var p Project
			if err := json.Unmarshal(v, &p); err != nil {
				return fmt.Errorf("reading project %s: %w: %w", k, ErrCorrupt, err)
			}
			out = append(out, p)
			return nil
		})
	})
	return out, err // bbolt's keys are sorted: so are the projects
}

// DeleteProject removes the added project name: its mirror first, then
// its record. In that order a failure (or a crash) between the two leaves
// the project recorded, where the daemon reads it, and the removal can be
// asked again; the other order would leave a mirror that a rebuild of the
// database brings back, a removed project returning.
func (s *Store) DeleteProject(name string) error {
	err := s.db.View(func(tx *bolt.Tx) error {
		if tx.Bucket(projectsBucket).Get([]byte(name)) == nil {
			return fmt.Errorf("deleting project %s: %w", name, ErrNoProject)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(s.projects, name+".json")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("deleting the mirror of project %s: %w", name, err)
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(projectsBucket).Delete([]byte(name))
	})
}

// rebuildProjects loads every mirrored project into the (new) database;
// one it cannot read the operator adds again.
func (s *Store) rebuildProjects() (int, error) {
	return rebuildBucket(s.db, s.projects, projectsBucket, func(data []byte) string {
		var p Project
		if json.Unmarshal(data, &p) != nil {
			return ""
		}
		return p.Name
	})
}
