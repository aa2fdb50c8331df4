// Command mmacheck is the host side of mma_probe.cu: it writes the crafted k-steps, checks that its input
// generator is mma_probe's bit for bit, fits the summation model (kernels.MMASum) to the tensor core's outputs,
// and checks kernels.MMABF16Dot16 against every output of a bulk run.
//
//	mmacheck crafted OUT            the crafted cases as blocks for `mma_probe file`
//	mmacheck golden OUT.bin         the crafted cases with the GPU's answers (mma, then wgmma), as Go source
//	mmacheck parity SEED dump.bin   the dumped inputs against this generator
//	mmacheck fit dump.bin           mismatches of a grid of candidate models on the dumped outputs
//	mmacheck check SEED D.mma [D.wg]  every output of a bulk run against kernels.MMABF16Dot16
package main

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"

	"bitalign/kernels"
)

func fail(f string, a ...any) {
	fmt.Fprintf(os.Stderr, "mmacheck: "+f+"\n", a...)
	os.Exit(2)
}

func main() {
	if len(os.Args) < 3 {
		fail("usage: mmacheck crafted|golden|parity|fit|check ...")
	}
	switch os.Args[1] {
	case "crafted":
		writeBlocks(os.Args[2], craftedBlocks(craftedCases()))
	case "golden":
		golden(os.Args[2])
	case "parity":
		seed, _ := strconv.ParseUint(os.Args[2], 0, 64)
		parity(seed, os.Args[3])
	case "fit":
		fit(os.Args[2])
	case "check":
		seed, _ := strconv.ParseUint(os.Args[2], 0, 64)
		for _, f := range os.Args[3:] {
			if !check(seed, f) {
				defer os.Exit(1)
			}
		}
	default:
		fail("unknown mode %q", os.Args[1])
	}
}

func writeBlocks(path string, bs []block) {
	buf := make([]byte, 0, len(bs)*4352)
	for i := range bs {
		for m := 0; m < 64; m++ {
			for j := 0; j < 16; j++ {
				buf = binary.LittleEndian.AppendUint16(buf, bs[i].A[m][j])
			}
		}
		for n := 0; n < 8; n++ {
			for j := 0; j < 16; j++ {
				buf = binary.LittleEndian.AppendUint16(buf, bs[i].B[n][j])
			}
		}
		for m := 0; m < 64; m++ {
			for n := 0; n < 8; n++ {
				buf = binary.LittleEndian.AppendUint32(buf, bs[i].C[m][n])
			}
		}
	}
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		fail("%v", err)
	}
}

func u32s(b []byte) []uint32 {
	r := make([]uint32, len(b)/4)
	for i := range r {
		r[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return r
}

// emulate is output (m, n) of block b by s.
func emulate(s kernels.MMASum, b *block, m, n int) uint32 {
	return math.Float32bits(s.Dot16(&b.A[m], &b.B[n], math.Float32frombits(b.C[m][n])))
}

func golden(path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		fail("%v", err)
	}
	cs := craftedCases()
	nb := (len(cs) + 7) / 8
	if len(data) != nb*2048*3 {
		fail("%s: %d bytes, want %d", path, len(data), nb*2048*3)
	}
	d := u32s(data)
	fmt.Printf("# The crafted k-steps of kernels/cuda/experiments/mmacheck (crafted.go) and the H200's answers, measured by\n")
	fmt.Printf("# mma_probe file (%s). Written by `mmacheck golden`; TestMMACrafted checks kernels.MMABF16Dot16 on every line.\n", os.Getenv("MMA_SOURCE"))
	fmt.Printf("# name | products j:a*b (bf16 bits, the rest +0*+0) | c (float32 bits) | mma.sync m16n8k16 | wgmma m64n8k16\n")
	for i, k := range cs {
		e := (i/8)*512 + (i%8)*8 + i%8
		var ps []string
		for j := 0; j < 16; j++ {
			if k.A[j] != 0 || k.B[j] != 0 {
				ps = append(ps, fmt.Sprintf("%d:%04X*%04X", j, k.A[j], k.B[j]))
			}
		}
		fmt.Printf("%s | %s | %08X | %08X | %08X\n", k.Name, strings.Join(ps, " "), k.C, d[e], d[nb*512+e])
	}
}

// dump is mma_probe's dump.bin: K blocks' inputs and their mma, wgmma and mma-again outputs.
type dump struct {
	bs         []block
	dm, dw, dx []uint32
}

func readDump(path string) dump {
	data, err := os.ReadFile(path)
	if err != nil {
		fail("%v", err)
	}
	K := len(data) / (2048 + 256 + 2048*4)
	var d dump
	d.bs = make([]block, K)
	o := 0
	for t := 0; t < K; t++ {
		for m := 0; m < 64; m++ {
			for j := 0; j < 16; j++ {
				d.bs[t].A[m][j] = binary.LittleEndian.Uint16(data[o:])
				o += 2
			}
		}
	}
	for t := 0; t < K; t++ {
		for n := 0; n < 8; n++ {
			for j := 0; j < 16; j++ {
				d.bs[t].B[n][j] = binary.LittleEndian.Uint16(data[o:])
				o += 2
			}
		}
	}
	for t := 0; t < K; t++ {
		for m := 0; m < 64; m++ {
			for n := 0; n < 8; n++ {
				d.bs[t].C[m][n] = binary.LittleEndian.Uint32(data[o:])
				o += 4
			}
		}
	}
	d.dm = u32s(data[o : o+K*2048])
	d.dw = u32s(data[o+K*2048 : o+2*K*2048])
	d.dx = u32s(data[o+2*K*2048 : o+3*K*2048])
	return d
}

func parity(seed uint64, path string) {
	d := readDump(path)
	bad := 0
	var g block
	for t := range d.bs {
		genBlock(seed, uint64(t), &g)
		if g != d.bs[t] {
			bad++
			if bad == 1 {
				fmt.Printf("block %d differs\n", t)
			}
		}
	}
	fmt.Printf("parity: %d of %d blocks differ\n", bad, len(d.bs))
}

func fit(path string) {
	d := readDump(path)
	same := 0
	for i := range d.dm {
		if d.dm[i] == d.dw[i] {
			same++
		}
	}
	fmt.Printf("wgmma = mma on %d of %d\n", same, len(d.dm))
	type cand struct {
		s   kernels.MMASum
		bad [nReg]int
		tot int
	}
	var cs []cand
	for _, g := range []int{16, 8, 4} {
		for f := 22; f <= 30; f++ {
			for _, nom := range []bool{false, true} {
				for _, tf := range []bool{false, true} {
					for _, r := range []kernels.MMARound{kernels.RoundZero, kernels.RoundNearest, kernels.RoundDown} {
						s := kernels.MMASum{Group: g, Frac: f, Nominal: nom, TruncFloor: tf, Round: r}
						cs = append(cs, cand{s: s})
					}
				}
			}
		}
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for ci := range cs {
		wg.Add(1)
		sem <- struct{}{}
		go func(c *cand) {
			defer func() { <-sem; wg.Done() }()
			for t := range d.bs {
				r := t % nReg
				if t >= 128 && r != 2 && r != 3 { // a sample: regimes 2, 3 in full
					continue
				}
				for e := 0; e < 512; e++ {
					if emulate(c.s, &d.bs[t], e/8, e%8) != d.dm[t*512+e] {
						c.bad[r]++
						c.tot++
					}
				}
			}
		}(&cs[ci])
	}
	wg.Wait()
	sort.Slice(cs, func(i, j int) bool { return cs[i].tot < cs[j].tot })
	for _, c := range cs[:12] {
		fmt.Printf("group %2d frac %d nominal %-5v floor %-5v round %d: %6d bad %v\n", c.s.Group, c.s.Frac, c.s.Nominal, c.s.TruncFloor, c.s.Round, c.tot, c.bad)
	}
	// first mismatches of the best
	best := cs[0].s
	shown := [nReg]int{}
	for t := range d.bs {
		r := t % nReg
		for e := 0; e < 512 && shown[r] < 3; e++ {
			if got := emulate(best, &d.bs[t], e/8, e%8); got != d.dm[t*512+e] {
				shown[r]++
				b := &d.bs[t]
				fmt.Printf("%s block %d (%d,%d): a %04X b %04X c %08X gpu %08X emu %08X\n", regimes[r], t, e/8, e%8, b.A[e/8], b.B[e%8], b.C[e/8][e%8], d.dm[t*512+e], got)
			}
		}
	}
}
