# Draws bench/report/chart.png from bench/report/ratios.tsv: one bar per
# comparison (extension / baseline) and the target of each as a mark.
set terminal pngcairo size 1100,560 font "DejaVu Sans,10"
set output OUT
set datafile separator "\t"
set style data histogram
set style fill solid 0.8 border -1
set boxwidth 0.6
set key top left
set ylabel "ratio (extension / baseline)"
set xtics rotate by -25 left
set grid ytics
set title "rate_limiter vs baselines (same run). Costs: lower is better; throughput and HOT: higher is better"
plot IN using 2:xtic(1) title "measured ratio" lc rgb "#3b7dd8", \
     '' using 0:3 with points pt 7 ps 1.5 lc rgb "#d83b3b" title "target"
