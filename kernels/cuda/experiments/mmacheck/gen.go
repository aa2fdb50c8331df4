package main

import "math"

// The input generator of mma_probe.cu, bit for bit (gen_bf, gen_c there): block t is 64 rows × 8 columns of
// dot products of length 16; A is (64, 16) bf16, B is (8, 16) bf16 (column n, k contiguous), C is (64, 8)
// float32; block t's regime is t % nReg.

const nReg = 8

// regimes names the generator's input regimes (index = t % nReg).
var regimes = [nReg]string{"narrow", "spread", "align-depth", "cancel", "subnormal", "special", "overflow", "raw-bits"}

func sm64(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
	x = (x ^ (x >> 27)) * 0x94D049BB133111EB
	return x ^ (x >> 31)
}

func hkey(seed, t, s uint64) uint64 { return sm64(sm64(seed+t) ^ s) }

func bfexp(u uint64, e uint32) uint16 {
	return uint16((u>>63)<<15 | uint64(e&0xFF)<<7 | (u>>56)&0x7F)
}

func bfSpecial(i uint32) uint16 {
	return [8]uint16{0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x7F81, 0x0000, 0x8000, 0x7F7F}[i&7]
}

func f32Special(i uint32) uint32 {
	return [8]uint32{0x7F800000, 0xFF800000, 0x7FC00000, 0x80000000, 0, 0x7F7FFFFF, 0xFF7FFFFF, 0x7FA00001}[i&7]
}

func genPlain(seed, t uint64, role, row, j, r uint32) uint16 {
	u := hkey(seed, t, uint64(role)<<32|uint64(row)<<8|uint64(j))
	x := uint32(u)
	switch r {
	case 0:
		return bfexp(u, 124+x%8)
	case 1:
		return bfexp(u, 107+x%41)
	case 2:
		if role == 0 {
			return bfexp(u, 96+x%32)
		}
		return bfexp(u, 125+x%3)
	case 3:
		return bfexp(u, 120+x%15)
	case 4:
		if role == 0 {
			if x%4 == 0 {
				return uint16((u>>63)<<15 | (u>>56)&0x7F)
			}
			return bfexp(u, 40+(x>>2)%50)
		}
		if x%4 == 0 {
			return bfexp(u, 150+(x>>2)%51)
		}
		return bfexp(u, 40+(x>>2)%50)
	case 5:
		if x%16 == 0 {
			return bfSpecial(x >> 4)
		}
		return bfexp(u, 124+(x>>8)%8)
	case 6:
		return bfexp(u, 180+x%12)
	default:
		return uint16(u >> 48)
	}
}

func genBF(seed, t uint64, role, row, j uint32) uint16 {
	r := uint32(t % nReg)
	if r == 3 && j&1 == 1 {
		p := genPlain(seed, t, role, row, j-1, r)
		x := uint32(hkey(seed, t, uint64(role)<<32|uint64(row)<<8|uint64(j)))
		if role == 0 {
			return p ^ uint16(x%4)
		}
		return p ^ 0x8000
	}
	return genPlain(seed, t, role, row, j, r)
}

func bf2f(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

func genC(seed, t uint64, m, n uint32) uint32 {
	r := uint32(t % nReg)
	u := hkey(seed, t, 2<<32|uint64(m)<<8|uint64(n))
	x := uint32(u)
	s := uint32(u>>63) << 31
	mant := uint32(u>>32) & 0x7FFFFF
	sel := (x >> 24) % 4
	switch r {
	case 0:
		if sel == 0 {
			return 0
		}
		return s | (120+x%16)<<23 | mant
	case 1:
		if sel == 0 {
			return 0
		}
		return s | (87+x%81)<<23 | mant
	case 2:
		switch sel {
		case 0:
			return 0
		case 1:
			return s | (128+x%3)<<23 | mant
		}
		return s | (87+x%41)<<23 | mant
	case 3:
		switch sel {
		case 0:
			return 0
		case 1:
			return s | (100+x%20)<<23 | mant
		}
		p := float32(bf2f(genBF(seed, t, 0, m, 0)) * bf2f(genBF(seed, t, 1, n, 0))) // exact
		pb := math.Float32bits(p) ^ 0x80000000
		if sel == 3 {
			return pb ^ x%8
		}
		return pb
	case 4:
		switch sel {
		case 0:
			return s
		case 1:
			return s | mant
		}
		return s | (1+x%24)<<23 | mant
	case 5:
		if x%8 == 0 {
			return f32Special(x >> 3)
		}
		return s | (120+(x>>3)%16)<<23 | mant
	case 6:
		if sel == 0 {
			return 0
		}
		return s | (240+x%15)<<23 | mant
	default:
		return uint32(u >> 32)
	}
}

// block is one block's inputs.
type block struct {
	A [64][16]uint16
	B [8][16]uint16
	C [64][8]uint32
}

func genBlock(seed, t uint64, b *block) {
	for m := uint32(0); m < 64; m++ {
		for j := uint32(0); j < 16; j++ {
			b.A[m][j] = genBF(seed, t, 0, m, j)
		}
		for n := uint32(0); n < 8; n++ {
			b.C[m][n] = genC(seed, t, m, n)
		}
	}
	for n := uint32(0); n < 8; n++ {
		for j := uint32(0); j < 16; j++ {
			b.B[n][j] = genBF(seed, t, 1, n, j)
		}
	}
}
