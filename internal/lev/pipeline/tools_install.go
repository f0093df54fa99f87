package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"

	"github.com/lever-jail/lever/internal/fspath"
	"github.com/lever-jail/lever/internal/lev/toolstamp"
	"github.com/lever-jail/lever/internal/lev/workfs"
)

// --- install_tool: a script under <workdir>/.lev/tools, stamped with its provenance ---

type installToolArgs struct {
	Name   string `json:"name" schema:"required"`
	Script string `json:"script" schema:"required"`
	// Replace must be set to overwrite an installed tool: the answer then names the stamp
	// it replaced, so no stamped tool is overwritten silently.
	Replace bool `json:"replace"`
}

func (a installToolArgs) validate() error {
	if err := toolstamp.CheckName(a.Name); err != nil {
		return err
	}
	if err := required("script", a.Script); err != nil {
		return err
	}
	if len(a.Script) > MaxWriteBytes {
		return errors.New(workfs.WriteCapText("script is", int64(len(a.Script))))
	}
	return nil
}

func (a installToolArgs) paths() ([]string, []string) {
	return nil, []string{toolstamp.Path(a.Name)}
}

// toolsDirRefusal keeps <workdir>/.lev/tools install_tool's: any other tool's write that
// names or resolves into it is refused, and install_tool's own write must resolve to a
// file directly in it (a .lev/tools that is a symlink to elsewhere in the workdir would
// put the stamped script where nothing looks for it, and an unstamped path where it
// should be).
func (p *Pipeline) toolsDirRefusal(tool string, a workfs.Access) *Result {
	dir := filepath.Join(p.FS.Workdir, filepath.FromSlash(toolstamp.Dir))
	if tool == "install_tool" {
		if filepath.Dir(a.Real) != dir || filepath.Dir(a.Abs) != dir {
			return refused(StepFence, "tools-dir", fmt.Sprintf("install_tool: refused: %s resolves to %s, not a file in %s", a.Path, a.Real, dir))
		}
		return nil
	}
	if fspath.Within(dir, a.Real) || fspath.Within(dir, a.Abs) {
		return refused(StepFence, "tools-dir", fmt.Sprintf("%s: refused: %s is in %s, which only install_tool writes (it stamps each script with the run that installed it)", tool, a.Path, toolstamp.Dir))
	}
	return nil
}

func installTools() []*Tool {
	return []*Tool{{
		Name:        "install_tool",
		Description: "Install a shell script as .lev/tools/NAME.sh, stamped with this run, its workdir and the time. An installed tool is replaced only with replace: true.",
		Schema:      schemaFor[installToolArgs](),
		parse:       strict[installToolArgs],
		run: func(ctx context.Context, p *Pipeline, c *Call) (*Result, error) {
			a := c.Args.(installToolArgs)
			data := toolstamp.Render([]byte(a.Script), p.RunID, p.FS.Workdir, time.Now())
			w := c.Writes[0]
			var was string
			// An existing file is read and replaced through one checked descriptor, and
			// only when the call says replace; its stamp is named in the answer.
			err := p.files().EditFile("install_tool", w, func(old []byte) ([]byte, error) {
				st, verr := toolstamp.Verify(old)
				switch {
				case verr == nil:
					was = "the tool " + st.String()
				case errors.Is(verr, toolstamp.ErrTampered):
					was = "a script changed since it was " + st.String()
				default:
					was = "an unstamped script (" + verr.Error() + ")"
				}
				if !a.Replace {
					return nil, &workfs.Refusal{Code: "tool-exists", Msg: fmt.Sprintf("install_tool: refused: %s already holds %s; call again with replace: true to replace it", a.Path(), was)}
				}
				return data, nil
			})
			if errors.Is(err, fs.ErrNotExist) {
				err = p.files().WriteFile("install_tool", w, data)
			}
			if err != nil {
				var r *workfs.Refusal
				if errors.As(err, &r) && r.Code == "tool-exists" {
					return refused(StepExecute, r.Code, r.Msg), nil
				}
				return nil, err
			}
			msg := fmt.Sprintf("installed %s (%d bytes), stamped by run %s", a.Path(), len(a.Script), p.RunID)
			if was != "" {
				msg += "; it replaced " + was
			}
			return &Result{Content: msg}, nil
		},
	}}
}

// Path is the workdir-relative file the call installs.
func (a installToolArgs) Path() string { return toolstamp.Path(a.Name) }
