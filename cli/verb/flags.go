package verb

import (
	"strings"
	"sync"

	ucli "github.com/urfave/cli/v3"
)

var flagHelpOnce sync.Once

// ShowFlagsTruly makes --help show each flag as urfave shows it, but a
// flag that takes no value with no value's name: urfave takes the first
// `quoted` text of any flag's usage for the name of its value, so a
// switch whose usage quotes a command (create --boot) read as if it took
// that command as an argument.
func ShowFlagsTruly() {
	flagHelpOnce.Do(func() {
		urfave := ucli.FlagStringer
		ucli.FlagStringer = func(f ucli.Flag) string {
			s := urfave(f)
			d, ok := f.(ucli.DocGenerationFlag)
			if !ok || d.TakesValue() || !strings.Contains(d.GetUsage(), "`") {
				return s
			}
			_, usage, found := strings.Cut(s, "\t")
			if !found {
				return s
			}
			return ucli.FlagNamePrefixer(f.Names(), "") + "\t" + usage
		}
	})
}
