package main

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestTiledIndex: the pre-tiled layout puts every element of an operand at
// its own place inside tiledLen, and stage s of tile t (K [16 S s, 16 S (s +
// 1))) fills the contiguous run of 32 R S bytes that wg_tile's bulk copy of
// that stage reads, with the probe's core-matrix layout inside a tile
// (benches/gemm/wgmma_probe.cu, core_offset: 16-byte rows of 8 values).
func TestTiledIndex(t *testing.T) {
	for _, c := range []struct {
		R, rows, kk, sk16 int
		mn                bool
	}{{wgBM, 256, 784, 7, false}, {wgBM, 784, 256, 4, true}, {wgBN, 512, 784, 7, true}, {wgBN, 64, 256, 4, true}, {wgBM, 80, 48, 2, false}} {
		seen := make(map[int]bool)
		for r := 0; r < c.rows; r++ {
			for k := 0; k < c.kk; k++ {
				i := tiledIndex(c.R, c.mn, r, k, c.kk)
				if i < 0 || i >= tiledLen(c.R, c.rows, c.kk) || seen[i] {
					t.Fatalf("%+v: element (%d,%d) at %d: out of range or taken", c, r, k, i)
				}
				seen[i] = true
				tile, rr := r/c.R, r%c.R
				stage := k / (16 * c.sk16)
				base := tile*c.R*c.kk + stage*16*c.sk16*c.R
				if i < base || i >= base+16*c.sk16*c.R {
					t.Fatalf("%+v: element (%d,%d) at %d, outside its stage's run [%d, %d)", c, r, k, i, base, base+16*c.sk16*c.R)
				}
				core := ((k>>3)*(c.R>>3) + rr>>3) * 128
				off := core + (rr&7)*16 + (k&7)*2
				if c.mn {
					off = core + (k&7)*16 + (rr&7)*2
				}
				if 2*(i-tile*c.R*c.kk) != off {
					t.Fatalf("%+v: element (%d,%d): byte %d of its tile, the probe's layout has %d", c, r, k, 2*(i-tile*c.R*c.kk), off)
				}
			}
		}
	}
}

// TestWgDropDrawMatchesTheEpilogue walks wg_tile's threads (tile, warp,
// lane, j) as the kernel assigns elements, states and draws (d[j] at row 16
// warp + g + 8 ((j/2)%2), column 8 (j/4) + 2t + j%2; column half h = j / 8
// draws from the state of thread (warp%2)*2 + h of the 32 x 32 tile row
// 2 tile + warp/2, its draw j % 8), and checks that dropDraw, the mma.sync
// kernels' assignment and the host's, names the same state and draw for
// each element, once each.
func TestWgDropDrawMatchesTheEpilogue(t *testing.T) {
	for _, sz := range [][2]int{{256, 512}, {64, 96}, {48, 64}, {16, 32}} {
		rows, hid := sz[0], sz[1]
		seen := make(map[[2]int]bool)
		gx, gy := ceilDiv(hid, wgBN), ceilDiv(rows, wgBM)
		for by := 0; by < gy; by++ {
			for bx := 0; bx < gx; bx++ {
				for warp := 0; warp < 4; warp++ {
					ty := by*2 + warp/2
					if ty >= ceilDiv(rows, 32) {
						continue // no state: every row of it is past the batch
					}
					for lane := 0; lane < 32; lane++ {
						g, tt := lane/4, lane%4
						for j := 0; j < 16; j++ {
							r := by*wgBM + warp*16 + g + 8*((j>>1)&1)
							c := bx*wgBN + (j>>2)*8 + 2*tt + j&1
							h := j / 8
							state := (ty*gx+bx)*128 + ((warp&1)*2+h)*32 + lane
							want := [2]int{state, j % 8}
							if seen[want] {
								t.Fatalf("%dx%d: draw %v used twice", rows, hid, want)
							}
							seen[want] = true
							if r >= rows || c >= hid {
								continue
							}
							if st, k := dropDraw(r, c, hid); [2]int{st, k} != want {
								t.Fatalf("%dx%d: element (%d,%d): dropDraw = (%d,%d), wg_tile draws (%d,%d)", rows, hid, r, c, st, k, want[0], want[1])
							}
						}
					}
				}
			}
		}
		if len(seen) != dropStates(rows, hid)*dropDraws {
			t.Fatalf("%dx%d: %d draws taken, the states hold %d", rows, hid, len(seen), dropStates(rows, hid)*dropDraws)
		}
	}
}

// TestWgmmaMatchesMmaSync (cuda): the warpgroup-MMA step and the mma.sync
// one draw the same dropout and compute the same sums up to their order: a
// run of each from the same seed gives losses equal to within 1e-3 (the
// first step's to 1e-5, before any update); the draws of another
// assignment would change the loss by about 1e-2.
func TestWgmmaMatchesMmaSync(t *testing.T) {
	if os.Getenv("SLUICE_BACKEND") != "cuda" {
		t.Skip("cuda only: the host backend runs neither")
	}
	dir := t.TempDir()
	losses := func(gemm string) []float64 {
		p := filepath.Join(dir, gemm+".losses")
		out := trainer(t, "-epochs", "1", "-gemm", gemm, "-losses", p)
		if gemm == "wgmma" && !strings.Contains(out, "warpgroup-MMA GEMMs agree") {
			t.Fatalf("-gemm wgmma did not use the warpgroup-MMA kernels:\n%s", out)
		}
		var ls []float64
		for _, line := range strings.Split(strings.TrimSpace(string(read(t, p))), "\n") {
			f := strings.Fields(line)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", p, line, err)
			}
			ls = append(ls, v)
		}
		return ls
	}
	wg, mma := losses("wgmma"), losses("bf16")
	if len(wg) == 0 || len(wg) != len(mma) {
		t.Fatalf("%d and %d losses", len(wg), len(mma))
	}
	for i := range wg {
		tol := 1e-3
		if i == 0 {
			tol = 1e-5
		}
		if d := math.Abs(wg[i]-mma[i]) / math.Abs(mma[i]); d > tol {
			t.Fatalf("step %d: loss %.7g (wgmma) against %.7g (mma.sync): relative difference %.2g > %g", i, wg[i], mma[i], d, tol)
		}
	}
}
