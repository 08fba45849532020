package testkit

import "github.com/golang-jwt/jwt/v5"

func jwtSubject(s string) jwt.RegisteredClaims { return jwt.RegisteredClaims{Subject: s} }
