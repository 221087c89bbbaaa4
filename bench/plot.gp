# Grouped bar chart for bench/run: per load case, shardload's median GB/s, the best of the NumPy and
# PyTorch baselines (warm cases only) and the limit the case is judged against (warm: 2-thread memcpy
# into fresh huge pages; cold: dd O_DIRECT). bench/run calls it as
#   gnuplot -e "data='FILE'; out='PNG'" bench/plot.gp
# FILE columns: "label" shardload numpy torch limit, "-" where a value does not apply.
if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
  set terminal pngcairo size 1400,700 noenhanced font ",10"
} else {
  set terminal png size 1400,700 noenhanced
}
set output out
set title "Load rate by case, timed inside each process, 2 threads (bars: median of runs; Python: best of runs)"
set ylabel "GB/s"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set datafile missing "-"
set key outside top center horizontal
set grid ytics
set xtics rotate by 20 right nomirror
set yrange [0:*]
plot data using 2:xtic(1) title "shardload" lc rgb "#1f77b4", \
     ''   using 3 title "NumPy baseline" lc rgb "#ff7f0e", \
     ''   using 4 title "PyTorch baseline" lc rgb "#2ca02c", \
     ''   using 5 title "limit (warm: memcpy into fresh huge pages; cold: dd O_DIRECT)" lc rgb "#999999"
