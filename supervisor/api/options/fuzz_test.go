package options_test

import (
	"bytes"
	"encoding/binary"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/sandboxd/sandboxd/supervisor/api/options"
	"github.com/sandboxd/sandboxd/supervisor/api/options/optionstest"
)

// FuzzParseOptions: CreateSandbox's options, as variants of any type,
// through optionstest.CheckCreate's checks.
//
// The input is a list of options, each: a name byte (below 0x80 one of
// the known names, by index; otherwise the next n&0x7f bytes are the
// name), a type byte (see variantOf) and a length byte with the value's
// bytes.
func FuzzParseOptions(f *testing.F) {
	names := options.CreateNames()
	u64 := func(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
	seed := func(opts ...[]byte) []byte { return bytes.Join(opts, nil) }
	opt := func(name string, typ byte, val []byte) []byte {
		var b []byte
		if i := slices.Index(names, name); i >= 0 {
			b = append(b, byte(i))
		} else {
			b = append(append(b, 0x80|byte(len(name))), name...)
		}
		return append(append(b, typ, byte(len(val))), val...)
	}
	for _, s := range [][]byte{
		seed(opt("MemoryMax", 1, u64(1<<30)), opt("TasksMax", 1, u64(64)), opt("Name", 0, []byte("agent-1"))),
		seed(opt("CPUQuotaPerSecUSec", 1, u64(500000)), opt("RuntimeMaxUSec", 1, u64(maxUSec)), opt("TTLUSec", 1, u64(maxUSec+1))),
		seed(opt("MemoryMax", 1, u64(12))), seed(opt("MemoryMax", 1, u64(16<<20))), seed(opt("MemoryMax", 1, u64(16<<20-1))),
		seed(opt("DiskQuota", 1, u64(0)), opt("TTLUSec", 1, u64(0)), opt("Name", 0, nil)),
		seed(opt("Name", 0, []byte("0123456789ab")), opt("Name", 0, []byte("é")), opt("Allow", 4, []byte("a:1\x00b:2"))),
		seed(opt("Network", 0, []byte("allowlist")), opt("Allow", 4, []byte("example.com:443")), opt("ReadOnlyProject", 3, []byte{1})),
		seed(opt("MemoryMax", 0, []byte("1G")), opt("CPUWeight", 2, []byte{1, 0, 0, 0}), opt("ReadOnlyProject", 0, []byte("true"))),
		seed(opt("memorymax", 1, u64(1)), opt("", 0, nil), opt("Name\xff", 11, []byte("x"))),
		seed(opt("Profile", 0, []byte("default")), opt("IOWeight", 1, u64(100)), opt("MemoryHigh", 1, u64(math.MaxUint64))),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > maxInput {
			return
		}
		optionstest.CheckCreate(t, optionsOf(data, names))
	})
}

// maxInput bounds the fuzz targets' inputs: Go minimizes an interesting
// input by trying it without each span of its bytes, which takes the
// square of its length in runs, and a few of a thousand bytes leave a
// 10 s run no time to fuzz. Longer inputs are skipped; they are never
// interesting.
const maxInput = 256

// maxUSec is the longest duration Go can hold, in µs.
const maxUSec = uint64(math.MaxInt64 / int64(time.Microsecond))

// optionsOf reads FuzzParseOptions's input.
func optionsOf(data []byte, names []string) map[string]dbus.Variant {
	in := map[string]dbus.Variant{}
	next := func(n int) []byte {
		n = min(n, len(data))
		b := data[:n]
		data = data[n:]
		return b
	}
	for len(data) >= 3 {
		n := next(1)[0]
		name := ""
		if n < 0x80 {
			name = names[int(n)%len(names)]
		} else {
			name = string(next(int(n & 0x7f)))
		}
		typ := next(1)
		l := next(1)
		if len(typ) == 0 || len(l) == 0 {
			break
		}
		in[name] = variantOf(typ[0], next(int(l[0])))
	}
	return in
}

// variantOf makes a variant of a type chosen by typ from the bytes val.
func variantOf(typ byte, val []byte) dbus.Variant {
	num := func() uint64 {
		var b [8]byte
		copy(b[:], val)
		return binary.LittleEndian.Uint64(b[:])
	}
	switch typ % 15 {
	case 0:
		return dbus.MakeVariant(string(val))
	case 1:
		return dbus.MakeVariant(num())
	case 2:
		return dbus.MakeVariant(uint32(num()))
	case 3:
		return dbus.MakeVariant(len(val) > 0 && val[0]&1 == 1)
	case 4:
		list := strings.Split(string(val), "\x00")
		if len(val) == 0 {
			list = nil
		}
		return dbus.MakeVariant(list)
	case 5:
		return dbus.MakeVariant(int32(num()))
	case 6:
		return dbus.MakeVariant(int64(num()))
	case 7:
		return dbus.MakeVariant(math.Float64frombits(num()))
	case 8:
		return dbus.MakeVariant(val)
	case 9:
		return dbus.MakeVariant(uint16(num()))
	case 10:
		return dbus.MakeVariant(dbus.ObjectPath(val))
	case 11:
		return dbus.MakeVariant(dbus.MakeVariant(string(val)))
	case 12:
		return dbus.MakeVariant(map[string]dbus.Variant{string(val): dbus.MakeVariant(num())})
	case 13:
		return dbus.MakeVariant([]uint64{num()})
	default:
		return dbus.MakeVariant(byte(num()))
	}
}
