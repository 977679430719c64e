package options

import (
	"fmt"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/supervisor"
	"github.com/sandboxd/sandboxd/supervisor/promotion"
)

// Promote reads Promote's options for owner: Force, AllowPrivileged and
// AllowEmpty (b), To (s). allowEmpty is the caller's alone: a promotion
// with nothing to promote is then no error.
func Promote(owner uint32, in map[string]dbus.Variant) (po promotion.PromoteOptions, allowEmpty bool, err error) {
	po = promotion.PromoteOptions{Owner: owner}
	for name, v := range in {
		switch name {
		case "Force":
			err = boolOption(name, v, &po.Force)
		case "AllowPrivileged":
			err = boolOption(name, v, &po.AllowPrivileged)
		case "AllowEmpty":
			err = boolOption(name, v, &allowEmpty)
		case "To":
			str, ok := v.Value().(string)
			if !ok {
				err = fmt.Errorf("option To has type %s; want s: %w", v.Signature(), supervisor.ErrInvalid)
			}
			po.To = str
		default:
			err = fmt.Errorf("unknown option %q (known: Force, To, AllowPrivileged, AllowEmpty): %w", name, supervisor.ErrInvalid)
		}
		if err != nil {
			return po, false, err
		}
	}
	return po, allowEmpty, nil
}

func boolOption(name string, v dbus.Variant, b *bool) error {
	x, ok := v.Value().(bool)
	if !ok {
		return fmt.Errorf("option %s has type %s; want b: %w", name, v.Signature(), supervisor.ErrInvalid)
	}
	*b = x
	return nil
}
