package program

import (
	"context"
	"os"
	"os/exec"
	"strconv"

	"golang.org/x/sys/unix"
)

// openProgram opens path with O_PATH: the file may be stat'ed and
// executed through its descriptor, but not read or written, and lvsd
// needs no read permission on it.
func openProgram(path string) (*os.File, error) {
	return os.OpenFile(path, unix.O_PATH|unix.O_CLOEXEC, 0)
}

// realPath is where f is, all symbolic links followed, as the kernel says;
// path when it cannot say.
func realPath(f *os.File, path string) string {
	if p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd()))); err == nil && len(p) > 0 && p[0] == '/' {
		return p
	}
	return path
}

// childFD is the descriptor the program file has in the child.
const childFD = 3

// command runs the opened file, not the path: the child gets the
// descriptor as fd 3 and executes /proc/self/fd/3 (what fexecve does).
// The descriptor stays open across exec, as it must for a script: its
// interpreter opens /proc/self/fd/3 to read it (so $0 is that name); an
// O_PATH descriptor gives the program nothing it could not open itself.
func (p *Program) command(ctx context.Context, args []string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "/proc/self/fd/"+strconv.Itoa(childFD), args...)
	cmd.Args[0] = p.Path
	cmd.ExtraFiles = []*os.File{p.file} // fd 3 = childFD
	return cmd
}
