package main

import "github.com/golang-jwt/jwt/v5"

func subject(s string) jwt.RegisteredClaims { return jwt.RegisteredClaims{Subject: s} }
