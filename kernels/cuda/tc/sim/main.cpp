// main.cpp: the launcher of the CPU simulation of tc_matmul.cu (tc_sim.h). One call runs one launch of a plan
// that kernels/cuda's planTC made (TestTCSimulated passes it), blocks one after another, every thread of a
// block a std::thread. Buffers are files of little-endian raw values, read before and written back after.
//
//   tc_sim tc_mm_<variant>   GX GY GZ BX SMEM  M K N G DT  NSEG B0..BNSEG  X W BIAS|- OUT PART|- [OB]
//   (OB: the persistent tc_tma.cu entries' ob; 1: OUT holds bf16 bits, else float32)
//   tc_sim tc_mm_tmd<R>_<chain|tree>  the same arguments, then C S (consumer warps, slots)
//   tc_sim tc_finish         GX BX  M N PARTS DT  BIAS|- OUT PART
//   tc_sim tc_attn[_kv16][_dec]_hd<HD>  GX GY BX SMEM  T S NH NKV SCALE_BITS DT  Q K V POS OUT  [MGX MBX]
//   tc_sim tc_attn[_kv16][_dec]_batch_hd<HD>  GX GY GZ BX SMEM  NH NKV SCALE_BITS DT  (T S Q K V POS OUT) × GZ  [MGX MBX]
//   (the decode entries: their chunk states go to a scratch of GZ·GX·GY·16·(HD+2) floats, poisoned, and
//   MGX MBX, when given, run tc_attn_merge[_batch] on it after them: grid MGX (× GZ), MBX threads; the kv16
//   entries' K and V files hold bf16 bits, 2 bytes a value)
//
// Build: g++ -std=c++20 -O1 -ffp-contract=off -DBITALIGN_TC_SIM -I kernels/cuda kernels/cuda/tc/sim/main.cpp
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "../tc_attention.cu"
#include "../tc_matmul.cu"
#include "../tc_tma.cu"
#include "../tc_wgmma.cu"

using MM = void (*)(float*, float*, const uint16_t*, const uint16_t*, const float*, int, int, int, Segs, int, int);

// the tc_tma.cu entries (tensor maps instead of x and w) and their w box rows (the variant's BN)
using TMA = void (*)(TmaMap, TmaMap, float*, float*, const float*, int, int, int, Segs, int, int);
static const std::map<std::string, std::pair<TMA, int>> tma_kernels_by_name = {
    {"tc_mm_tma256_chain", {tc_mm_tma256_chain, 256}}, {"tc_mm_tma128t_tree", {tc_mm_tma128t_tree, 128}}};
// the persistent ones (one more parameter: ob)
using TMAP = void (*)(TmaMap, TmaMap, void*, float*, const float*, int, int, int, Segs, int, int, int, float*);
static const std::map<std::string, std::pair<TMAP, int>> tmap_kernels_by_name = {
    {"tc_mm_tma256p_chain", {tc_mm_tma256p_chain, 256}},
    {"tc_mm_tma128p_chain", {tc_mm_tma128p_chain, 128}},
    {"tc_mm_tma128tp_tree", {tc_mm_tma128tp_tree, 128}}};

// the decode entries (two more parameters: C, S) and their x box rows R
using TMD = void (*)(TmaMap, TmaMap, float*, float*, const float*, int, int, int, Segs, int, int, int, int);
#define TMD_E(R) {"tc_mm_tmd" #R "_chain", {tc_mm_tmd##R##_chain, R}}, {"tc_mm_tmd" #R "_tree", {tc_mm_tmd##R##_tree, R}}
static const std::map<std::string, std::pair<TMD, int>> tmd_kernels_by_name = {TMD_E(8), TMD_E(16), TMD_E(32), TMD_E(64)};

#define E(n) {#n, n}, {#n "_vec", n##_vec}
static const std::map<std::string, MM> kernels_by_name = {E(tc_mm_dec16_chain), E(tc_mm_dec16_tree),
                                                          E(tc_mm_dec64_chain), E(tc_mm_dec64_tree),
                                                          E(tc_mm_big_chain),   E(tc_mm_big64_tree),
                                                          E(tc_mm_wg128_chain), E(tc_mm_wg64t_tree)};

template <typename T>
static std::vector<T> slurp(const std::string& path) {
    std::vector<T> v;
    if (path == "-") return v;
    std::ifstream f(path, std::ios::binary | std::ios::ate);
    if (!f) {
        fprintf(stderr, "tc_sim: cannot read %s\n", path.c_str());
        exit(2);
    }
    const auto n = (size_t)f.tellg();
    v.resize(n / sizeof(T));
    f.seekg(0);
    f.read(reinterpret_cast<char*>(v.data()), (std::streamsize)n);
    return v;
}

template <typename T>
static void spill(const std::string& path, const std::vector<T>& v) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(v.data()), (std::streamsize)(v.size() * sizeof(T)));
    if (!f) {
        fprintf(stderr, "tc_sim: cannot write %s\n", path.c_str());
        exit(2);
    }
}

// run_grid runs body(thread) for every thread of every block, blocks in order, with a fresh barrier, warp boards
// and dynamic shared memory (filled with 0xFF7F, a bf16 NaN, so that reading an element nothing wrote shows).
template <typename F>
static void run_grid(unsigned gx, unsigned gy, unsigned gz, unsigned bx, size_t smem, F body) {
    gridDim = {gx, gy, gz};
    blockDim = {bx, 1, 1};
    std::vector<uint16_t> sm(smem / 2 + 64);
    for (unsigned z = 0; z < gz; z++)
        for (unsigned y = 0; y < gy; y++)
            for (unsigned x = 0; x < gx; x++) {
                std::fill(sm.begin(), sm.end(), (uint16_t)0xFF7F);
                std::barrier<> bar((std::ptrdiff_t)bx);
                const unsigned nw = (bx + 31) / 32;
                std::vector<SimWarp> warps(nw);
                for (unsigned i = 0; i < nw; i++) warps[i].bar = new std::barrier<>(32);
                const unsigned ng = (bx + 127) / 128;
                std::vector<SimWarpgroup> groups(ng);
                for (unsigned i = 0; i < ng; i++) groups[i].bar = new std::barrier<>((std::ptrdiff_t)min(128u, bx));
                int orv = 0;
                sim_block = {&bar, sm.data(), warps.data(), groups.data(), &orv};
                std::vector<std::thread> th;
                for (unsigned t = 0; t < bx; t++)
                    th.emplace_back([=] {
                        threadIdx = {t, 0, 0};
                        blockIdx = {x, y, z};
                        body();
                    });
                for (auto& t : th) t.join();
                for (auto& w : warps) delete w.bar;
                for (auto& g : groups) delete g.bar;
            }
}

// The tc_attention.cu entries of cache element KV (float, or uint16_t: the kv16 entries' bf16 bits), by name.
template <typename KV>
struct AttEntries {
    using One = void (*)(float*, const float*, const KV*, const KV*, const int*, int, int, int, int, float, int);
    using Dec = void (*)(float*, const float*, const KV*, const KV*, const int*, int, int, int, int, float, int, float*);
    using Batch = void (*)(const TcAttSeq*, int, int, float, int);
    using DecBatch = void (*)(const TcAttSeq*, int, int, float, int, float*);
    std::map<std::string, std::pair<One, int>> one;
    std::map<std::string, std::pair<Dec, int>> dec;
    std::map<std::string, std::pair<Batch, int>> batch;
    std::map<std::string, std::pair<DecBatch, int>> decBatch;
};
#define ATT_MAIN(P, HD, SM) {#P "hd" #HD, {P##hd##HD, SM(HD)}}
static const AttEntries<float> att32 = {
    {ATT_MAIN(tc_attn_, 16, TC_ATT_SMEM), ATT_MAIN(tc_attn_, 32, TC_ATT_SMEM), ATT_MAIN(tc_attn_, 64, TC_ATT_SMEM),
     ATT_MAIN(tc_attn_, 80, TC_ATT_SMEM), ATT_MAIN(tc_attn_, 96, TC_ATT_SMEM), ATT_MAIN(tc_attn_, 128, TC_ATT_SMEM)},
    {ATT_MAIN(tc_attn_dec_, 64, TC_ATT_DEC_SMEM), ATT_MAIN(tc_attn_dec_, 128, TC_ATT_DEC_SMEM)},
    {ATT_MAIN(tc_attn_batch_, 16, TC_ATT_SMEM), ATT_MAIN(tc_attn_batch_, 32, TC_ATT_SMEM),
     ATT_MAIN(tc_attn_batch_, 64, TC_ATT_SMEM), ATT_MAIN(tc_attn_batch_, 80, TC_ATT_SMEM),
     ATT_MAIN(tc_attn_batch_, 96, TC_ATT_SMEM), ATT_MAIN(tc_attn_batch_, 128, TC_ATT_SMEM)},
    {ATT_MAIN(tc_attn_dec_batch_, 64, TC_ATT_DEC_SMEM), ATT_MAIN(tc_attn_dec_batch_, 128, TC_ATT_DEC_SMEM)}};
static const AttEntries<uint16_t> att16 = {
    {ATT_MAIN(tc_attn_kv16_, 16, TC_ATT_SMEM16), ATT_MAIN(tc_attn_kv16_, 32, TC_ATT_SMEM16),
     ATT_MAIN(tc_attn_kv16_, 64, TC_ATT_SMEM16), ATT_MAIN(tc_attn_kv16_, 80, TC_ATT_SMEM16),
     ATT_MAIN(tc_attn_kv16_, 96, TC_ATT_SMEM16), ATT_MAIN(tc_attn_kv16_, 128, TC_ATT_SMEM16)},
    {ATT_MAIN(tc_attn_kv16_dec_, 64, TC_ATT_DEC_SMEM16), ATT_MAIN(tc_attn_kv16_dec_, 128, TC_ATT_DEC_SMEM16)},
    {ATT_MAIN(tc_attn_kv16_batch_, 16, TC_ATT_SMEM16), ATT_MAIN(tc_attn_kv16_batch_, 32, TC_ATT_SMEM16),
     ATT_MAIN(tc_attn_kv16_batch_, 64, TC_ATT_SMEM16), ATT_MAIN(tc_attn_kv16_batch_, 80, TC_ATT_SMEM16),
     ATT_MAIN(tc_attn_kv16_batch_, 96, TC_ATT_SMEM16), ATT_MAIN(tc_attn_kv16_batch_, 128, TC_ATT_SMEM16)},
    {ATT_MAIN(tc_attn_kv16_dec_batch_, 64, TC_ATT_DEC_SMEM16), ATT_MAIN(tc_attn_kv16_dec_batch_, 128, TC_ATT_DEC_SMEM16)}};

// run_attention: one tc attention launch (and the decode entries' merge) as the usage above says.
template <typename KV>
static int run_attention(const std::string& name, int argc, char** argv) {
    const AttEntries<KV>& E = [] {
        if constexpr (sizeof(KV) == 2) return att16;
        else return att32;
    }();
    auto I = [&](int i) { return atoi(argv[i]); };
    const int hd = atoi(name.substr(name.rfind("hd") + 2).c_str());
    if (name.find("_batch_hd") != std::string::npos) {  // many sequences, a TcAttSeq each (grid z)
        auto at = E.batch.find(name);
        auto dit = E.decBatch.find(name);
        if (at == E.batch.end() && dit == E.decBatch.end()) return fprintf(stderr, "tc_sim: no kernel %s\n", name.c_str()), 2;
        const int gz = I(4), nh = I(7), nkv = I(8), dt = I(10);
        const int need = dit != E.decBatch.end() ? dit->second.second : at->second.second;
        const bool merge = dit != E.decBatch.end() && argc == 11 + 7 * gz + 2;
        if (gz < 1 || (argc != 11 + 7 * gz && !merge)) return fprintf(stderr, "tc_sim: %s wants 9 + 7·GZ arguments\n", name.c_str()), 2;
        if (I(6) < need) return fprintf(stderr, "tc_sim: %s: %d bytes of shared memory, the kernel uses %d\n", name.c_str(), I(6), need), 2;
        const float scale = __uint_as_float((uint32_t)strtoul(argv[9], nullptr, 10));
        std::vector<std::vector<float>> q(gz), out(gz);
        std::vector<std::vector<KV>> kc(gz), vc(gz);
        std::vector<std::vector<int>> pos(gz);
        std::vector<TcAttSeq> seqs(gz);
        for (int z = 0; z < gz; z++) {
            const int a = 11 + 7 * z;
            q[z] = slurp<float>(argv[a + 2]), kc[z] = slurp<KV>(argv[a + 3]), vc[z] = slurp<KV>(argv[a + 4]);
            pos[z] = slurp<int>(argv[a + 5]), out[z] = slurp<float>(argv[a + 6]);
            seqs[z] = {out[z].data(), q[z].data(), (const float*)kc[z].data(), (const float*)vc[z].data(), pos[z].data(), I(a), I(a + 1)};
        }
        if (dit == E.decBatch.end()) {
            run_grid(I(2), I(3), (unsigned)gz, I(5), (size_t)I(6), [&] { at->second.first(seqs.data(), nh, nkv, scale, dt); });
        } else {
            std::vector<float> part((size_t)gz * I(2) * I(3) * 16 * (hd + 2), __uint_as_float(0x7FBADBADu));
            run_grid(I(2), I(3), (unsigned)gz, I(5), (size_t)I(6), [&] { dit->second.first(seqs.data(), nh, nkv, scale, dt, part.data()); });
            if (merge)
                run_grid(I(argc - 2), 1, (unsigned)gz, I(argc - 1), 0,
                         [&] { tc_attn_merge_batch(seqs.data(), part.data(), nh, nkv, hd, dt, I(2)); });
        }
        for (int z = 0; z < gz; z++) spill(argv[11 + 7 * z + 6], out[z]);
        return 0;
    }
    auto at = E.one.find(name);
    auto dit = E.dec.find(name);
    if (at == E.one.end() && dit == E.dec.end()) return fprintf(stderr, "tc_sim: no kernel %s\n", name.c_str()), 2;
    const bool merge = dit != E.dec.end() && argc == 19;
    if (argc != 17 && !merge) return fprintf(stderr, "tc_sim: %s wants 15 arguments\n", name.c_str()), 2;
    const int T = I(6), S = I(7), nh = I(8), nkv = I(9), dt = I(11);
    const int need = dit != E.dec.end() ? dit->second.second : at->second.second;
    if (I(5) < need) return fprintf(stderr, "tc_sim: %s: %d bytes of shared memory, the kernel uses %d\n", name.c_str(), I(5), need), 2;
    const float scale = __uint_as_float((uint32_t)strtoul(argv[10], nullptr, 10));
    auto q = slurp<float>(argv[12]);
    auto kc = slurp<KV>(argv[13]);
    auto vc = slurp<KV>(argv[14]);
    auto pos = slurp<int>(argv[15]);
    auto out = slurp<float>(argv[16]);
    if (dit == E.dec.end()) {
        run_grid(I(2), I(3), 1, I(4), (size_t)I(5), [&] {
            at->second.first(out.data(), q.data(), kc.data(), vc.data(), pos.data(), T, S, nh, nkv, scale, dt);
        });
    } else {
        std::vector<float> part((size_t)I(2) * I(3) * 16 * (hd + 2), __uint_as_float(0x7FBADBADu));
        run_grid(I(2), I(3), 1, I(4), (size_t)I(5), [&] {
            dit->second.first(out.data(), q.data(), kc.data(), vc.data(), pos.data(), T, S, nh, nkv, scale, dt, part.data());
        });
        if (merge)
            run_grid(I(17), 1, 1, I(18), 0, [&] { tc_attn_merge(out.data(), pos.data(), part.data(), T, nh, nkv, hd, dt, I(2)); });
    }
    spill(argv[16], out);
    return 0;
}

int main(int argc, char** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: see main.cpp\n");
        return 2;
    }
    const std::string name = argv[1];
    auto I = [&](int i) { return atoi(argv[i]); };
    if (name == "tc_finish") {
        if (argc != 11) return fprintf(stderr, "tc_sim: tc_finish wants 9 arguments\n"), 2;
        const int M = I(4), N = I(5), parts = I(6), dt = I(7);
        auto bias = slurp<float>(argv[8]);
        auto out = slurp<float>(argv[9]);
        auto part = slurp<float>(argv[10]);
        run_grid(I(2), 1, 1, I(3), 0, [&] {
            tc_finish(out.data(), part.data(), bias.empty() ? nullptr : bias.data(), M, N, parts, dt);
        });
        spill(argv[9], out);
        return 0;
    }
    if (name.rfind("tc_attn_", 0) == 0) return name.find("_kv16_") != std::string::npos
                                                   ? run_attention<uint16_t>(name, argc, argv)
                                                   : run_attention<float>(name, argc, argv);
    auto it = kernels_by_name.find(name);
    auto tit = tma_kernels_by_name.find(name);
    auto pit = tmap_kernels_by_name.find(name);
    auto dit = tmd_kernels_by_name.find(name);
    if (it == kernels_by_name.end() && tit == tma_kernels_by_name.end() && pit == tmap_kernels_by_name.end() &&
        dit == tmd_kernels_by_name.end())
        return fprintf(stderr, "tc_sim: no kernel %s\n", name.c_str()), 2;
    const int M = I(7), K = I(8), N = I(9), G = I(10), dt = I(11), nseg = I(12);
    const bool persist = pit != tmap_kernels_by_name.end(), tmd = dit != tmd_kernels_by_name.end();
    if (argc != 13 + nseg + 1 + 5 + (persist ? 1 : 0) + (tmd ? 2 : 0))
        return fprintf(stderr, "tc_sim: %s: wrong argument count\n", name.c_str()), 2;
    Segs segs{};
    segs.n = nseg;
    for (int i = 0; i <= nseg; i++) segs.b[i] = I(13 + i);
    const int a = 13 + nseg + 1;
    auto x = slurp<uint16_t>(argv[a]);
    auto w = slurp<uint16_t>(argv[a + 1]);
    auto bias = slurp<float>(argv[a + 2]);
    auto out = slurp<float>(argv[a + 3]);
    auto part = slurp<float>(argv[a + 4]);
    if (tmd) {  // x box 64 × R, w box 64 × 16·C (kernels/cuda/tc.go, launchTMD)
        const int C = I(13 + nseg + 1 + 5), S = I(13 + nseg + 1 + 6);
        const TmaMap tx = sim_tma_map(x.data(), M, K, dit->second.second, TC_TMA_BK);
        const TmaMap tw = sim_tma_map(w.data(), N, K, 16 * C, TC_TMA_BK);
        const TMD fn = dit->second.first;
        run_grid(I(2), I(3), I(4), I(5), (size_t)I(6), [&] {
            fn(tx, tw, out.data(), part.empty() ? nullptr : part.data(), bias.empty() ? nullptr : bias.data(), M, K, N,
               segs, G, dt, C, S);
        });
    } else if (persist) {  // as below, with ob; a bf16 OUT is read and written as 16-bit words
        const int ob = I(13 + nseg + 1 + 5);
        const TmaMap tx = sim_tma_map(x.data(), M, K, TC_TMA_BM, TC_TMA_BK);
        const TmaMap tw = sim_tma_map(w.data(), N, K, pit->second.second, TC_TMA_BK);
        const TMAP fn = pit->second.first;
        auto outh = ob ? slurp<uint16_t>(argv[a + 3]) : std::vector<uint16_t>();
        void* const o = ob ? (void*)outh.data() : (void*)out.data();
        // the tree's stash: 2·BM·BN floats a block, poisoned (a subtree read before it was written shows)
        std::vector<float> stash((size_t)I(2) * 2 * TC_TMA_BM * pit->second.second, __uint_as_float(0x7FBADBADu));
        run_grid(I(2), I(3), I(4), I(5), (size_t)I(6), [&] {
            fn(tx, tw, o, part.empty() ? nullptr : part.data(), bias.empty() ? nullptr : bias.data(), M, K, N, segs, G,
               dt, ob, stash.data());
        });
        if (ob) {
            spill(argv[a + 3], outh);
            if (!part.empty()) spill(argv[a + 4], part);
            return 0;
        }
    } else if (tit != tma_kernels_by_name.end()) {  // x box 64 × TC_TMA_BM, w box 64 × BN, as kernels/cuda/tc.go encodes them
        const TmaMap tx = sim_tma_map(x.data(), M, K, TC_TMA_BM, TC_TMA_BK);
        const TmaMap tw = sim_tma_map(w.data(), N, K, tit->second.second, TC_TMA_BK);
        const TMA fn = tit->second.first;
        run_grid(I(2), I(3), I(4), I(5), (size_t)I(6), [&] {
            fn(tx, tw, out.data(), part.empty() ? nullptr : part.data(), bias.empty() ? nullptr : bias.data(), M, K, N,
               segs, G, dt);
        });
    } else {
        const MM fn = it->second;
        run_grid(I(2), I(3), I(4), I(5), (size_t)I(6), [&] {
            fn(out.data(), part.empty() ? nullptr : part.data(), x.data(), w.data(), bias.empty() ? nullptr : bias.data(),
               M, K, N, segs, G, dt);
        });
    }
    spill(argv[a + 3], out);
    if (!part.empty()) spill(argv[a + 4], part);
    return 0;
}
