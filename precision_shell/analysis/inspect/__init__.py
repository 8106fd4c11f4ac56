"""What inspection commands show: node panels, neighbourhoods, histograms, metric series and
the `eval` expression checker and its worker."""
