# Draws bench/report/chart.png from bench/report/ratios.tsv: one bar per
# comparison (extension / baseline, log scale) and the target of each as a
# red mark. Costs: at or below the mark is met; throughput and HOT share:
# at or above.
set terminal pngcairo size 1400,900 font "DejaVu Sans,10" noenhanced
set output OUT
set datafile separator "\t"
set style data histogram
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set boxwidth 0.7
set key top left
set logscale y
set yrange [0.25:4]
set ytics (0.25, 0.5, 0.75, 1, 1.5, 2, 3, 4)
set ylabel "ratio, extension / baseline (log scale)"
set xtics rotate by -30 left
set grid ytics
set bmargin 24
set rmargin 28
set title "rate_limiter vs its alternatives, measured in one run"
plot IN using 2:xtic(1) title "measured ratio" lc rgb "#3b7dd8", \
     '' using ($0):3 with points pt 7 ps 1.6 lc rgb "#d83b3b" title "target", \
     '' using ($0):2:(sprintf("%.2f", $2)) with labels offset 0,0.8 notitle
