package main

import (
	"database/sql"
	"fmt"
	"os"
	"time"

	_ "modernc.org/sqlite"
)

func main() {
	db, err := sql.Open("sqlite", "file:"+os.Args[1]+"?mode=ro")
	if err != nil {
		panic(err)
	}
	rows, err := db.Query("SELECT type, name, tbl_name, sql FROM sqlite_master")
	if err != nil {
		panic(err)
	}
	for rows.Next() {
		var a, b, c string
		var d sql.NullString
		rows.Scan(&a, &b, &c, &d)
		fmt.Println(a, b, c, d.String)
	}
	for _, q := range os.Args[2:] {
		r, err := db.Query("EXPLAIN QUERY PLAN " + q)
		if err != nil {
			fmt.Println(err)
			continue
		}
		for r.Next() {
			var id, parent, notused int
			var detail string
			r.Scan(&id, &parent, &notused, &detail)
			fmt.Println("PLAN", detail)
		}
		t := time.Now()
		var n int
		db.QueryRow("SELECT count(*) FROM (" + q + ")").Scan(&n)
		fmt.Println(n, time.Since(t))
	}
}
