package units

import (
	"errors"
	"fmt"

	"github.com/godbus/dbus/v5"
)

// Conditions callers branch on. Errors from this package wrap one of these
// (or are a *JobError) and say what was being done to which unit.
var (
	// ErrExists: a unit of that name is already loaded (running, or failed
	// and not yet reset). systemd: org.freedesktop.systemd1.UnitExists.
	ErrExists = errors.New("unit already exists")
	// ErrNotFound: no unit of that name is loaded. systemd:
	// org.freedesktop.systemd1.NoSuchUnit.
	ErrNotFound = errors.New("no such unit")
	// ErrUnsupported: this systemd or cgroup layout cannot do what was
	// asked (a property it does not know, a method it refuses).
	ErrUnsupported = errors.New("not supported by this systemd")
	// ErrInvalidName: a unit name systemd would refuse, or not a scope.
	ErrInvalidName = errors.New("invalid unit name")
	// ErrInvalidLimits: limits that make no sense; nothing was started.
	ErrInvalidLimits = errors.New("invalid limits")
)

// JobError is a systemd job that ended with a result other than "done".
type JobError struct {
	Op   string // what the job was for: "starting", "stopping"
	Unit string
	// Result is systemd's job result: "canceled", "timeout", "failed",
	// "dependency", "skipped", "invalid", "assert" or "unsupported".
	Result string
}

func (e *JobError) Error() string {
	return fmt.Sprintf("%s %s: job ended with result %q", e.Op, e.Unit, e.Result)
}

// D-Bus error names systemd answers with, and the sentinel each one means.
var dbusErrors = map[string]error{
	"org.freedesktop.systemd1.UnitExists":     ErrExists,
	"org.freedesktop.systemd1.NoSuchUnit":     ErrNotFound,
	"org.freedesktop.DBus.Error.NotSupported": ErrUnsupported,
	// StartTransientUnit answers this for a property it does not know:
	// "Cannot set property X, or unknown property."
	"org.freedesktop.DBus.Error.PropertyReadOnly": ErrUnsupported,
	// A method this systemd does not have (FreezeUnit before 246).
	"org.freedesktop.DBus.Error.UnknownMethod": ErrUnsupported,
}

// wrap says what was being done to which unit and, when systemd's answer
// means one of the sentinels, wraps that sentinel as well as the answer.
func wrap(op, unit string, err error) error {
	if sentinel, ok := dbusErrors[dbusErrorName(err)]; ok {
		return fmt.Errorf("%s %s: %w: %w", op, unit, sentinel, err)
	}
	return fmt.Errorf("%s %s: %w", op, unit, err)
}

// dbusErrorName is the D-Bus error name of err ("" when err is no answer
// from the bus). godbus returns replies as dbus.Error values, but builds
// *dbus.Error too: take either.
func dbusErrorName(err error) string {
	var v dbus.Error
	if errors.As(err, &v) {
		return v.Name
	}
	var p *dbus.Error
	if errors.As(err, &p) && p != nil {
		return p.Name
	}
	return ""
}
